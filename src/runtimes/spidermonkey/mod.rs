//! SpiderMonkey 147 as StarlingMonkey (ComponentizeJS) builds link it: not read yet (issue 47).
//!
//! What a walk of its interpreter's frames would read is in `layouts` (compiled with the
//! tests only until a walk uses it): the layout of its structures, derived from the code of
//! the npm package's debug engine by rules checked on the release and weval engines, and
//! where each engine keeps the `JSContext*`.

#[cfg(test)]
mod layouts;
