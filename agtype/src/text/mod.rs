//! The text format: `agtype_in` and `agtype_out`.

mod error;
mod fast;
mod int8;
mod lex;
mod parse;
mod print;

pub use error::ParseError;
pub use parse::parse;
pub(crate) use parse::parse_reference;
pub use print::to_text;
