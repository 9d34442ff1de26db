//! What the profile shows less of, and why: told when it happens, while the run goes on.

use std::fmt;

/// A warning about a registered module (or the run), from
/// [`ProfilerHandle::take_warnings`](crate::ProfilerHandle::take_warnings). Its `Display` is the
/// sentence `wasmspy record` prints.
///
/// ```
/// use wasmspy::{Warning, WarningKind};
///
/// let kind = WarningKind::NoDwarf { why: None, advice: Some("build with -g".into()) };
/// let warning = Warning { module: Some("app.wasm".into()), kind };
/// assert_eq!(
///     warning.to_string(),
///     "app.wasm has no DWARF debug info: the profile names functions, without file:line (build with -g)"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The module it is about, by the name it was registered with; `None` when it is about the
    /// run (a runtime instance shown to the profiler).
    pub module: Option<String>,
    /// What is missing from the profile, and why.
    pub kind: WarningKind,
}

/// What a [`Warning`] says is missing from the profile.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WarningKind {
    /// The module has no DWARF debug info (nor a source map): its functions are named,
    /// without file:line. `why`, when its language runtime is known to ship so (QuickJS's
    /// engine); else `advice`, for the toolchain its `producers` section names.
    NoDwarf {
        /// What the module is, when that explains it.
        why: Option<String>,
        /// What would give it file:line: the flags of the toolchain that built it (`build
        /// with -g or -gline-tables-only` for clang's), or its source map given to wasmspy.
        advice: Option<String>,
    },
    /// Part or all of the module's DWARF is unreadable: the code it describes is shown by
    /// function name only.
    DamagedDwarf {
        /// Which part, and why.
        why: String,
    },
    /// The module's name section is malformed and ignored: its functions are named by index.
    DamagedNames {
        /// What is wrong with it.
        why: String,
    },
    /// The module's source map is unreadable, points nowhere, or is not a map of this build
    /// of the module: its code has no file:line from it.
    SourceMap {
        /// Which map, what is wrong with it, and what the profile shows instead.
        why: String,
    },
    /// A language runtime recognized in the module (Go, CPython, QuickJS) whose own frames
    /// cannot be shown: its samples keep the runtime's Wasm frames.
    RuntimeUnreadable {
        /// The runtime, and why.
        why: String,
    },
    /// A share of the walks of a language runtime's stacks failed (its memory did not read as
    /// the runtime lays it out): those samples keep their Wasm frames.
    RuntimeWalks {
        /// How many, and what failed.
        why: String,
    },
}

impl Warning {
    /// A warning about the module registered as `module`.
    pub(crate) fn about(module: &str, kind: WarningKind) -> Self {
        Warning {
            module: Some(module.to_string()),
            kind,
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.module, &self.kind) {
            // "app.wasm has no DWARF…", "app.wasm is componentize-py's CPython…".
            (Some(module), WarningKind::NoDwarf { .. }) => write!(f, "{module} {}", self.kind),
            (Some(module), kind) => write!(f, "{module}: {kind}"),
            (None, kind) => write!(f, "{kind}"),
        }
    }
}

impl fmt::Display for WarningKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WarningKind::NoDwarf { why: Some(why), .. } => write!(f, "is {why}"),
            WarningKind::NoDwarf { why: None, advice } => {
                f.write_str(
                    "has no DWARF debug info: the profile names functions, without file:line",
                )?;
                match advice {
                    Some(advice) => write!(f, " ({advice})"),
                    None => Ok(()),
                }
            }
            WarningKind::DamagedNames { why } => {
                write!(f, "ignoring its malformed name section: {why}")
            }
            WarningKind::DamagedDwarf { why }
            | WarningKind::SourceMap { why }
            | WarningKind::RuntimeUnreadable { why }
            | WarningKind::RuntimeWalks { why } => f.write_str(why),
        }
    }
}
