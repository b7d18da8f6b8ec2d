//! Printing for people: every line `cordon` prints for a person goes through [`line`], so that
//! control and bidi characters in values a caller chose (arguments, descriptions, audit fields,
//! error messages that echo them) are shown escaped instead of steering the terminal. JSON output
//! is exact JSON and is not touched (it escapes C0 controls itself).

pub use cordon_core::display::{escape_line as line, is_unsafe};

/// `println!` for people: the formatted line with controls and bidi characters escaped.
macro_rules! outln {
    ($($arg:tt)*) => {
        println!("{}", $crate::term::line(&format!($($arg)*)))
    };
}

/// `eprintln!` for people: the formatted line with controls and bidi characters escaped.
macro_rules! errln {
    ($($arg:tt)*) => {
        eprintln!("{}", $crate::term::line(&format!($($arg)*)))
    };
}

pub(crate) use {errln, outln};
