//! The code of a finished run's result that is not `ok`, as the client holds it: parsed once
//! where the gRPC answer is converted, so no other place compares result codes as strings.

use cordon_core::code::ResultCode;

/// One of cordon's [`ResultCode`]s, or, from a daemon this cordon does not fully know (a newer
/// one, or an answer with no code), the code as sent: shown as it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotOkCode {
    Known(ResultCode),
    Raw(String),
}

impl NotOkCode {
    /// The code of a result the daemon sent (`Finished.error_code`); an empty code is `NOT_OK`.
    pub fn from_wire(s: String) -> NotOkCode {
        if s.is_empty() {
            return NotOkCode::Raw("NOT_OK".into());
        }
        ResultCode::parse(&s).map_or(NotOkCode::Raw(s), NotOkCode::Known)
    }

    pub fn as_str(&self) -> &str {
        match self {
            NotOkCode::Known(c) => c.as_str(),
            NotOkCode::Raw(s) => s,
        }
    }

    /// See [`ResultCode::is_output_failure`]; a code this client does not know is not one.
    pub fn is_output_failure(&self) -> bool {
        matches!(self, NotOkCode::Known(c) if c.is_output_failure())
    }
}

impl PartialEq<ResultCode> for NotOkCode {
    fn eq(&self, other: &ResultCode) -> bool {
        *self == NotOkCode::Known(*other)
    }
}

impl serde::Serialize for NotOkCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl std::fmt::Display for NotOkCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_parse_once_and_print_as_sent() {
        for c in ResultCode::ALL {
            let code = NotOkCode::from_wire(c.as_str().to_string());
            assert_eq!(code, *c);
            assert_eq!(code.as_str(), c.as_str());
            assert_eq!(serde_json::to_value(&code).ok(), Some(serde_json::json!(c.as_str())));
        }
        assert_eq!(NotOkCode::from_wire(String::new()), NotOkCode::Raw("NOT_OK".into()));
        let newer = NotOkCode::from_wire("SOMETHING_NEW".into());
        assert_eq!((newer.as_str(), newer.is_output_failure()), ("SOMETHING_NEW", false));
        assert!(NotOkCode::from_wire("OUTPUT_SCHEMA_MISMATCH".into()).is_output_failure());
        assert!(!NotOkCode::from_wire("EXIT_CODE".into()).is_output_failure());
    }
}
