//! `wasmspy serve -H`: headers set on every request before the component sees it, as
//! `wasmtime serve -H` sets them.

use anyhow::{anyhow, Context, Result};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};

/// The headers given, in order.
pub struct RequestHeaders(Vec<(HeaderName, HeaderValue)>);

impl RequestHeaders {
    /// Each argument `name: value`, or `@FILE` with one such header per line (blank lines
    /// skipped).
    pub fn parse(arguments: &[String]) -> Result<Self> {
        let mut headers = Vec::new();
        for argument in arguments {
            match argument.strip_prefix('@') {
                Some(path) => {
                    let text = std::fs::read_to_string(path)
                        .with_context(|| format!("cannot read headers from `{path}`"))?;
                    for line in text.lines().filter(|l| !l.trim().is_empty()) {
                        headers.push(parse_one(line)?);
                    }
                }
                None => headers.push(parse_one(argument)?),
            }
        }
        Ok(RequestHeaders(headers))
    }

    /// Replaces `request`'s headers of the names given by the values given: every value of a
    /// name repeated on the command line is kept.
    pub fn apply(&self, request: &mut HeaderMap) {
        for (name, _) in &self.0 {
            request.remove(name);
        }
        for (name, value) in &self.0 {
            request.append(name, value.clone());
        }
    }
}

fn parse_one(header: &str) -> Result<(HeaderName, HeaderValue)> {
    let (name, value) = header
        .split_once(':')
        .ok_or_else(|| anyhow!("header `{header}` is missing `:`"))?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .with_context(|| format!("invalid header name in header `{header}`"))?;
    let value = HeaderValue::from_str(value.trim_start())
        .with_context(|| format!("invalid header value in header `{header}`"))?;
    Ok((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_headers_replace_the_requests_and_repeat() {
        let headers = RequestHeaders::parse(&[
            "x-tenant: a".into(),
            "x-tenant: b".into(),
            "accept:text/plain".into(),
        ])
        .unwrap();
        let mut request = HeaderMap::new();
        request.insert("x-tenant", HeaderValue::from_static("old"));
        request.insert("host", HeaderValue::from_static("kept"));
        headers.apply(&mut request);
        let tenants: Vec<_> = request.get_all("x-tenant").iter().collect();
        assert_eq!(tenants, ["a", "b"]);
        assert_eq!(request["accept"], "text/plain");
        assert_eq!(request["host"], "kept");
        assert!(RequestHeaders::parse(&["no colon".into()]).is_err());
    }
}
