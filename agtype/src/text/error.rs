use std::fmt;

/// Why text is not valid agtype: AGE's primary message, its detail line when
/// AGE has one, the SQLSTATE AGE raises, and the byte offset in the input
/// where the offending token starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    position: usize,
    message: String,
    detail: Option<String>,
    sqlstate: &'static str,
}

const SYNTAX: &str = "invalid input syntax for type agtype";

impl ParseError {
    /// A syntax error with AGE's detail text (SQLSTATE 22P02).
    pub(crate) fn syntax(position: usize, detail: String) -> Self {
        ParseError {
            position,
            message: SYNTAX.to_owned(),
            detail: Some(detail),
            sqlstate: "22P02",
        }
    }

    pub(crate) fn token_invalid(position: usize, token: &str) -> Self {
        Self::syntax(position, format!("Token \"{token}\" is invalid."))
    }

    pub(crate) fn expected(position: usize, what: &str, found: &str) -> Self {
        Self::syntax(position, format!("Expected {what}, but found \"{found}\"."))
    }

    pub(crate) fn ended(position: usize) -> Self {
        Self::syntax(position, "The input string ended unexpectedly.".to_owned())
    }

    pub(crate) fn other(position: usize, sqlstate: &'static str, message: &str) -> Self {
        ParseError {
            position,
            message: message.to_owned(),
            detail: None,
            sqlstate,
        }
    }

    /// An error from PostgreSQL's int8/float8/numeric input functions.
    pub(crate) fn from_cast(position: usize, message: String) -> Self {
        let sqlstate = if message.contains("out of range") || message.contains("overflows") {
            "22003"
        } else {
            "22P02"
        };
        ParseError {
            position,
            message,
            detail: None,
            sqlstate,
        }
    }

    pub(crate) fn nul_escape(position: usize) -> Self {
        ParseError {
            position,
            message: "unsupported Unicode escape sequence".to_owned(),
            detail: Some("\\u0000 cannot be converted to text.".to_owned()),
            sqlstate: "22P05",
        }
    }

    pub(crate) fn too_deep(position: usize) -> Self {
        Self::other(position, "54001", "stack depth limit exceeded")
    }

    /// Byte offset into the input.
    pub fn position(&self) -> usize {
        self.position
    }

    /// AGE's primary message, e.g. `invalid input syntax for type agtype`.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// AGE's detail line, e.g. `Token "01" is invalid.`
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }

    /// The SQLSTATE AGE reports, e.g. `22P02`.
    pub fn sqlstate(&self) -> &'static str {
        self.sqlstate
    }
}

/// `<message>[: <detail>] (at byte <position>)`
impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        write!(f, " (at byte {})", self.position)
    }
}

impl std::error::Error for ParseError {}
