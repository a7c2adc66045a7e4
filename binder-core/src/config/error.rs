//! Configuration errors: every problem names where it came from, the full key path and what was
//! expected.

use std::fmt;

/// One thing wrong with a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where the offending value came from: a file path, an environment variable, or `None`
    /// for values set in code or defaults.
    pub origin: Option<String>,
    /// The full key path, e.g. `spring.cloud.stream.bindings.input.consumer.maxAttempts`.
    pub path: String,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.origin {
            Some(origin) => write!(f, "{origin}: {}: {}", self.path, self.message),
            None => write!(f, "{}: {}", self.path, self.message),
        }
    }
}

/// Why a configuration could not be loaded. Loading reports every problem it finds at once.
///
/// `Debug` shows the same text as `Display`, so `?` in a `main` prints it readably.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A file could not be read or parsed.
    #[error("cannot read configuration file {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// The parser's or the file system's reason.
        reason: String,
    },
    /// The configuration was read but is invalid.
    #[error("{}", render(.0))]
    Invalid(Vec<Problem>),
}

impl fmt::Debug for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl ConfigError {
    /// The individual problems (empty for file errors).
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Invalid(p) => p,
            ConfigError::File { .. } => &[],
        }
    }
}

fn render(problems: &[Problem]) -> String {
    render_problems("invalid configuration", problems, 2)
}

/// Problems as one message: `<heading> (<n> problems):`, then one line each, indented by
/// `indent` spaces (a binder nests its list one level under the runtime's).
///
/// ```
/// use binder_core::config::{Problem, render_problems};
///
/// let p = Problem { origin: None, path: "spring.rabbitmq.hots".into(), message: "unknown".into() };
/// assert_eq!(render_problems("bad", &[p], 2), "bad (1 problem):\n  - spring.rabbitmq.hots: unknown");
/// ```
pub fn render_problems(heading: &str, problems: &[Problem], indent: usize) -> String {
    let mut out = format!(
        "{heading} ({} problem{}):",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" }
    );
    for p in problems {
        out.push('\n');
        out.push_str(&" ".repeat(indent));
        out.push_str("- ");
        out.push_str(&p.to_string());
    }
    out
}

/// Collects problems while a configuration is read, so all are reported together (the
/// [`Section`](super::Section) and [`FieldValue`](super::FieldValue) readers push to it).
#[derive(Debug, Default)]
pub struct Problems(pub(crate) Vec<Problem>);

impl Problems {
    /// Records a problem at a key path; `origin` is where the value was written (a file), if
    /// known.
    pub fn push(
        &mut self,
        origin: Option<&str>,
        path: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.0.push(Problem {
            origin: origin.map(str::to_owned),
            path: path.into(),
            message: message.into(),
        });
    }

    /// How many problems were found so far.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn into_result<T>(self, value: T) -> Result<T, ConfigError> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ConfigError::Invalid(self.0))
        }
    }
}

/// Edit distance between two strings (optimal string alignment: insertions, deletions,
/// substitutions and adjacent transpositions each cost 1).
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// The candidate nearest to `given`, if it is near enough to be a likely typo: what the
/// configuration's "did you mean" suggestions use. Keys are compared ignoring case, `-` and
/// `_` (so `max-atempts` finds `maxAttempts`), and a candidate is near enough within one edit
/// per three characters of `given` (at least one, at most three).
///
/// ```
/// use binder_core::config::did_you_mean;
///
/// assert_eq!(did_you_mean("hots", ["host", "port"]), Some("host"));
/// assert_eq!(did_you_mean("colour", ["host", "port"]), None);
/// ```
pub fn did_you_mean<'a>(
    given: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let given = super::key::canonical(given);
    let limit = (given.chars().count() / 3).clamp(1, 3);
    candidates
        .into_iter()
        .map(|c| (distance(&given, &super::key::canonical(c)), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// A text that is none of a keyword's values (an exchange type, an acknowledge mode …), with
/// the nearest valid one suggested.
///
/// ```
/// use binder_core::config::AcknowledgeMode;
///
/// let e = "MANUEL".parse::<AcknowledgeMode>().unwrap_err();
/// assert_eq!(e.to_string(), "unknown value `MANUEL`; did you mean `MANUAL`?");
/// assert_eq!(e.value(), "MANUEL");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct UnknownValue {
    value: String,
    message: String,
}

impl UnknownValue {
    /// `value` is none of `valid`.
    pub fn new(value: &str, valid: &[&str]) -> Self {
        UnknownValue {
            value: value.to_owned(),
            message: unknown_key_message("value", value, valid),
        }
    }

    /// The text that was given.
    pub fn value(&self) -> &str {
        &self.value
    }
}

/// `unknown property `x``, with a suggestion or the list of valid keys.
/// What to say of an unknown key: the nearest valid one when it is near enough (a likely
/// typo), else every valid one. `what` names the kind of key (`property`, `key`).
///
/// ```
/// use binder_core::config::unknown_key_message;
///
/// assert_eq!(
///     unknown_key_message("property", "hots", &["host", "port"]),
///     "unknown property `hots`; did you mean `host`?"
/// );
/// ```
pub fn unknown_key_message(what: &str, key: &str, valid: &[&str]) -> String {
    match did_you_mean(key, valid.iter().copied()) {
        Some(near) => format!("unknown {what} `{key}`; did you mean `{near}`?"),
        None => format!(
            "unknown {what} `{key}`; expected one of: {}",
            valid.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_counts_transpositions_once() {
        assert_eq!(distance("maxattempts", "maxattempts"), 0);
        assert_eq!(distance("maxatempts", "maxattempts"), 1);
        assert_eq!(distance("maxattemtps", "maxattempts"), 1);
        assert_eq!(distance("", "abc"), 3);
    }

    #[test]
    fn suggestions_ignore_spelling_style() {
        let keys = ["maxAttempts", "backOffMultiplier", "concurrency"];
        assert_eq!(did_you_mean("max-atempts", keys), Some("maxAttempts"));
        assert_eq!(did_you_mean("CONCURENCY", keys), Some("concurrency"));
        assert_eq!(did_you_mean("color", keys), None);
    }

    #[test]
    fn errors_render_every_problem_with_origin_and_path() {
        let mut p = Problems::default();
        p.push(Some("application.yaml"), "a.b", "bad");
        p.push(None, "c", "worse");
        let err = p.into_result(()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid configuration (2 problems):\n  - application.yaml: a.b: bad\n  - c: worse"
        );
    }
}
