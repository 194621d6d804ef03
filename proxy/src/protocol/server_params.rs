//! A server connection's ParameterStatus values, kept as the messages a
//! greeting repeats: one allocation for all of them. As a list of name and
//! value strings they took about thirty, some 1.7 kB of heap a
//! connection, for as long as it lived.

use bytes::{Bytes, BytesMut};

use crate::wire::{backend, write};

/// ParameterStatus messages, each whole, in the order their names were
/// first reported (a server reports each name once at login, and `set`
/// changes a value in its place).
#[derive(Debug, Default, Clone)]
pub struct ServerParams(Bytes);

impl ServerParams {
    /// From the ParameterStatus messages a login read, as the server sent
    /// them (one value a name), up to the first that is not one: copied
    /// into a room of their size.
    pub fn from_messages(messages: &[u8]) -> Self {
        let whole: usize = backend::parameter_status_frames(messages)
            .map(<[u8]>::len)
            .sum();
        Self(Bytes::copy_from_slice(&messages[..whole]))
    }

    /// Name and value of each, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        backend::parameter_status_frames(&self.0).filter_map(backend::parameter_status)
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        let frame = backend::parameter_status_frames(&self.0)
            .find(|f| backend::is_parameter_status_of(f, name))?;
        backend::parameter_status(frame).map(|(_, v)| v)
    }

    /// The server reported `name` as `value`: true when that changed what
    /// a greeting says. A change writes the messages again (rare: a SET of
    /// a reported setting).
    pub fn set(&mut self, name: &str, value: &str) -> bool {
        if self.get(name) == Some(value) {
            return false;
        }
        let mut out = BytesMut::with_capacity(self.0.len() + name.len() + value.len() + 7);
        let mut found = false;
        for frame in backend::parameter_status_frames(&self.0) {
            if backend::is_parameter_status_of(frame, name) {
                write::parameter_status(&mut out, name, value);
                found = true;
            } else {
                out.extend_from_slice(frame);
            }
        }
        if !found {
            write::parameter_status(&mut out, name, value);
        }
        self.0 = out.freeze();
        true
    }

    /// All of them as the ParameterStatus messages of a greeting (shared,
    /// not copied).
    pub fn messages(&self) -> Bytes {
        self.0.clone()
    }

    pub fn to_vec(&self) -> Vec<(String, String)> {
        self.iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(params: &[(&str, &str)]) -> Bytes {
        let mut out = BytesMut::new();
        for (k, v) in params {
            write::parameter_status(&mut out, k, v);
        }
        out.freeze()
    }

    #[test]
    fn values_keep_their_order_and_change_in_place() {
        let mut p = ServerParams::from_messages(&messages(&[("a", "1"), ("bb", "22")]));
        assert_eq!(
            p.to_vec(),
            [("a".into(), "1".into()), ("bb".into(), "22".into())]
        );
        assert_eq!(p.get("bb"), Some("22"));
        assert_eq!(p.get("b"), None, "a name that begins another's is not it");
        assert_eq!(p.get("bb2"), None);
        let first = p.messages();
        assert!(!p.set("a", "1"));
        assert_eq!(
            p.messages().as_ptr(),
            first.as_ptr(),
            "kept while unchanged"
        );
        assert!(p.set("a", "longer"));
        assert!(p.set("c", ""));
        assert_eq!(
            p.messages(),
            messages(&[("a", "longer"), ("bb", "22"), ("c", "")])
        );
    }

    /// Anything but whole ParameterStatus messages ends the list there.
    #[test]
    fn malformed_bytes_end_the_list() {
        let good = messages(&[("a", "1")]);
        for bad in [
            &b"S\0\0\0"[..],
            b"S\0\0\0\x02",
            b"Z\0\0\0\x05I",
            b"S\xff\xff\xff\xffab",
        ] {
            let mut buf = good.to_vec();
            buf.extend_from_slice(bad);
            let p = ServerParams::from_messages(&buf);
            assert_eq!(p.to_vec(), [("a".into(), "1".into())], "{bad:?}");
        }
    }
}
