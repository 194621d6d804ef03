//! The text format: `agtype_in` and `agtype_out`.

mod error;
mod lex;
mod parse;
mod print;

pub use error::ParseError;
pub use parse::parse;
pub use print::to_text;
