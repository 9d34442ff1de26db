//! SpiderMonkey 147 as StarlingMonkey (ComponentizeJS) builds link it: not read yet (issue 47).
//!
//! What a walk of its interpreter's frames reads is in `layouts`: the layout of its
//! structures, derived from the code of the npm package's debug engine by rules checked on
//! the release and weval engines, and where each engine keeps the `JSContext*`.

#[allow(dead_code)]
mod layouts;
