//! `agtype_in`: text to [`Value`], without recursion (an explicit stack
//! bounded by [`MAX_DEPTH`](crate::MAX_DEPTH)).

use std::borrow::Cow;

use super::error::ParseError;
use super::int8::int8in;
use super::lex::{Lexer, Tok};
use crate::float::{float8in, parse_float_token};
use crate::key::Key;
use crate::numeric::Numeric;
use crate::value::{Edge, Object, Path, Value, Vertex};

/// Parses agtype text exactly as AGE's `agtype_in` accepts it.
pub fn parse(input: &str) -> Result<Value, ParseError> {
    match super::fast::parse(input) {
        Some(v) => Ok(v),
        None => parse_reference(input),
    }
}

/// The reference parser: PostgreSQL's lexer token by token, with AGE's
/// error messages. [`parse`] runs it for whatever its fast path declines.
pub(crate) fn parse_reference(input: &str) -> Result<Value, ParseError> {
    Parser {
        lx: Lexer::new(input),
    }
    .run()
}

/// An open container. Elements and pairs wait in shared scratch stacks
/// (from `start` on) and move into one exactly sized allocation when the
/// container closes, so no container's storage is ever reallocated.
enum Frame {
    Array { start: usize },
    Object { start: usize, key: Key },
}

struct Parser<'a> {
    lx: Lexer<'a>,
}

/// What a scalar token was, kept until we know whether an annotation follows.
enum Scalar<'a> {
    Null,
    Bool(bool),
    Number { float: bool, text: &'a str },
    FloatWord(f64, &'a str),
    String(Cow<'a, str>),
}

impl<'a> Parser<'a> {
    /// Next token with its start offset and source text.
    fn next(&mut self) -> Result<(Tok<'a>, usize, &'a str), ParseError> {
        let tok = self.lx.next_token()?;
        Ok((tok, self.lx.tok_start, self.lx.tok_text()))
    }

    /// After a value: consumes `:: name` if present and returns the name.
    fn annotation(&mut self) -> Result<Option<(&'a str, usize)>, ParseError> {
        if !self.lx.at_annotation() {
            return Ok(None);
        }
        self.next()?;
        let (tok, at, text) = self.next()?;
        match tok {
            Tok::Word | Tok::True | Tok::False | Tok::Null | Tok::FloatWord(_) => {
                Ok(Some((text, at)))
            }
            _ => Err(ParseError::other(
                at,
                "22023",
                "invalid value for annotation",
            )),
        }
    }

    fn run(mut self) -> Result<Value, ParseError> {
        let mut stack: Vec<Frame> = Vec::new();
        let mut items: Vec<Value> = Vec::new();
        let mut pairs: Vec<(Key, Value)> = Vec::new();
        'value: loop {
            let (tok, at, text) = self.next()?;
            let mut value = match tok {
                Tok::LBracket => {
                    if stack.len() >= crate::MAX_DEPTH {
                        return Err(ParseError::too_deep(at));
                    }
                    if self.lx.eat(b']') {
                        self.finish_array(Vec::new())?
                    } else {
                        stack.push(Frame::Array { start: items.len() });
                        continue 'value;
                    }
                }
                Tok::LBrace => {
                    if stack.len() >= crate::MAX_DEPTH {
                        return Err(ParseError::too_deep(at));
                    }
                    let (t, at2, text2) = self.next()?;
                    match t {
                        Tok::RBrace => self.finish_object(Vec::new())?,
                        Tok::String(key) => {
                            self.expect_colon()?;
                            stack.push(Frame::Object {
                                start: pairs.len(),
                                key: Key::from(key),
                            });
                            continue 'value;
                        }
                        Tok::End => return Err(ParseError::ended(at2)),
                        _ => return Err(ParseError::expected(at2, "string or \"}\"", text2)),
                    }
                }
                Tok::Null => self.scalar(Scalar::Null, at)?,
                Tok::True => self.scalar(Scalar::Bool(true), at)?,
                Tok::False => self.scalar(Scalar::Bool(false), at)?,
                Tok::Number { float } => self.scalar(Scalar::Number { float, text }, at)?,
                Tok::FloatWord(f) => self.scalar(Scalar::FloatWord(f, text), at)?,
                Tok::String(s) => self.scalar(Scalar::String(s), at)?,
                Tok::End => return Err(ParseError::ended(at)),
                _ => return Err(ParseError::expected(at, "agtype value", text)),
            };
            // A value is complete: hand it to its container, closing as many
            // containers as the input closes.
            loop {
                match stack.last_mut() {
                    None => {
                        let (t, at, text) = self.next()?;
                        if t != Tok::End {
                            return Err(ParseError::expected(at, "end of input", text));
                        }
                        return Ok(value);
                    }
                    Some(Frame::Array { start }) => {
                        let start = *start;
                        items.push(value);
                        let (t, at, text) = self.next()?;
                        match t {
                            Tok::Comma => continue 'value,
                            Tok::RBracket => {
                                stack.pop();
                                let own: Vec<Value> = items.drain(start..).collect();
                                value = self.finish_array(own)?;
                            }
                            Tok::End => return Err(ParseError::ended(at)),
                            _ => return Err(ParseError::expected(at, "\",\" or \"]\"", text)),
                        }
                    }
                    Some(Frame::Object { start, key }) => {
                        let start = *start;
                        pairs.push((std::mem::take(key), value));
                        let (t, at, text) = self.next()?;
                        match t {
                            Tok::Comma => {
                                let (t, at, text) = self.next()?;
                                match t {
                                    Tok::String(k) => *key = Key::from(k),
                                    Tok::End => return Err(ParseError::ended(at)),
                                    _ => return Err(ParseError::expected(at, "string", text)),
                                }
                                self.expect_colon()?;
                                continue 'value;
                            }
                            Tok::RBrace => {
                                stack.pop();
                                let own: Vec<(Key, Value)> = pairs.drain(start..).collect();
                                value = self.finish_object(own)?;
                            }
                            Tok::End => return Err(ParseError::ended(at)),
                            _ => return Err(ParseError::expected(at, "\",\" or \"}\"", text)),
                        }
                    }
                }
            }
        }
    }

    fn expect_colon(&mut self) -> Result<(), ParseError> {
        let (t, at, text) = self.next()?;
        match t {
            Tok::Colon => Ok(()),
            Tok::End => Err(ParseError::ended(at)),
            _ => Err(ParseError::expected(at, "\":\"", text)),
        }
    }

    fn finish_array(&mut self, items: Vec<Value>) -> Result<Value, ParseError> {
        match self.annotation()? {
            None => Ok(Value::Array(items)),
            Some((name, at)) if name.eq_ignore_ascii_case("path") => Path::try_from_values(items)
                .map(Value::Path)
                .map_err(|e| ParseError::other(at, "22023", e.message())),
            Some((_, at)) => Err(invalid_object_annotation(at)),
        }
    }

    fn finish_object(&mut self, pairs: Vec<(Key, Value)>) -> Result<Value, ParseError> {
        let annotation = self.annotation()?;
        let object = Object::from_pairs(pairs);
        let shape = |e: crate::ShapeError, at| ParseError::other(at, "22023", e.message());
        match annotation {
            None => Ok(Value::Object(object)),
            Some((name, at)) if name.eq_ignore_ascii_case("vertex") => {
                Vertex::try_from_object(object)
                    .map(Value::Vertex)
                    .map_err(|e| shape(e, at))
            }
            Some((name, at)) if name.eq_ignore_ascii_case("edge") => Edge::try_from_object(object)
                .map(Value::Edge)
                .map_err(|e| shape(e, at)),
            Some((_, at)) => Err(invalid_object_annotation(at)),
        }
    }

    fn scalar(&mut self, s: Scalar<'a>, start: usize) -> Result<Value, ParseError> {
        let annotation = self.annotation()?;
        if let Scalar::Null = s {
            // AGE ignores any annotation on null, even an unknown one.
            return Ok(Value::Null);
        }
        let Some((name, at)) = annotation else {
            return plain_scalar(s, start);
        };
        let text: Cow<'a, str> = match s {
            Scalar::Null => unreachable!("handled above"),
            Scalar::Bool(b) => Cow::Borrowed(if b { "true" } else { "false" }),
            Scalar::Number { text, .. } | Scalar::FloatWord(_, text) => Cow::Borrowed(text),
            Scalar::String(s) => s,
        };
        let cast = |m| ParseError::from_cast(at, m);
        if name.eq_ignore_ascii_case("numeric") {
            Numeric::parse(&text).map(Value::Numeric).map_err(cast)
        } else if name.eq_ignore_ascii_case("integer") {
            int8in(&text).map(Value::Integer).map_err(cast)
        } else if name.eq_ignore_ascii_case("float") {
            float8in(&text).map(Value::Float).map_err(cast)
        } else {
            Err(ParseError::other(
                at,
                "22023",
                "invalid annotation value for scalar",
            ))
        }
    }
}

fn invalid_object_annotation(at: usize) -> ParseError {
    ParseError::other(at, "22023", "invalid annotation value for object")
}

fn plain_scalar(s: Scalar<'_>, at: usize) -> Result<Value, ParseError> {
    Ok(match s {
        Scalar::Null => Value::Null,
        Scalar::Bool(b) => Value::Bool(b),
        Scalar::Number { float: false, text } => Value::Integer(text.parse().map_err(|_| {
            ParseError::from_cast(
                at,
                format!("value \"{text}\" is out of range for type bigint"),
            )
        })?),
        Scalar::Number { float: true, text } => {
            Value::Float(parse_float_token(text).map_err(|m| ParseError::from_cast(at, m))?)
        }
        Scalar::FloatWord(f, _) => Value::Float(f),
        Scalar::String(s) => Value::String(s.into_owned()),
    })
}
