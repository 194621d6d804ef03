//! A transcript client: sends exact message sequences and records every
//! answer, so a run through the proxy can be compared with a direct run
//! message for message.

use bytes::{BufMut, BytesMut};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// One backend message: tag and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub tag: char,
    pub body: Vec<u8>,
}

impl Msg {
    /// SQLSTATE of an ErrorResponse.
    pub fn sqlstate(&self) -> Option<String> {
        self.body
            .split(|&b| b == 0)
            .find(|f| f.first() == Some(&b'C'))
            .map(|f| String::from_utf8_lossy(&f[1..]).into_owned())
    }
}

impl std::fmt::Display for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}",
            self.tag,
            String::from_utf8_lossy(&self.body).replace('\0', "|")
        )
    }
}

pub struct Raw {
    stream: TcpStream,
    buf: BytesMut,
    out: BytesMut,
}

fn cstr(b: &mut BytesMut, s: &str) {
    b.put_slice(s.as_bytes());
    b.put_u8(0);
}

impl Raw {
    /// Connects as `postgres` to `postgres` (trust auth) with extra startup
    /// parameters, and reads up to the first ReadyForQuery.
    pub async fn connect(port: u16, params: &[(&str, &str)]) -> Self {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let mut raw = Self {
            stream,
            buf: BytesMut::new(),
            out: BytesMut::new(),
        };
        // Defaults the caller's own user or database replace.
        let defaults = [("user", "postgres"), ("database", "postgres")];
        let all: Vec<(&str, &str)> = defaults
            .into_iter()
            .filter(|(k, _)| params.iter().all(|(p, _)| p != k))
            .chain(params.iter().copied())
            .collect();
        let pkt = crate::raw::startup_with(&all);
        raw.stream.write_all(&pkt).await.expect("startup");
        let msgs = raw.until_ready().await;
        assert!(
            msgs.iter().all(|m| m.tag != 'E'),
            "startup failed: {msgs:?}"
        );
        raw
    }

    fn msg(&mut self, tag: u8, body: impl FnOnce(&mut BytesMut)) -> &mut Self {
        self.out.put_u8(tag);
        let at = self.out.len();
        self.out.put_u32(0);
        body(&mut self.out);
        let len = (self.out.len() - at) as u32;
        self.out[at..at + 4].copy_from_slice(&len.to_be_bytes());
        self
    }

    pub fn query(&mut self, sql: &str) -> &mut Self {
        self.msg(b'Q', |b| cstr(b, sql))
    }

    pub fn parse(&mut self, name: &str, sql: &str) -> &mut Self {
        self.msg(b'P', |b| {
            cstr(b, name);
            cstr(b, sql);
            b.put_i16(0);
        })
    }

    /// Bind with text parameters (`None` is NULL).
    pub fn bind(&mut self, portal: &str, stmt: &str, params: &[Option<&str>]) -> &mut Self {
        self.msg(b'B', |b| {
            cstr(b, portal);
            cstr(b, stmt);
            b.put_i16(0);
            b.put_i16(params.len() as i16);
            for p in params {
                match p {
                    Some(v) => {
                        b.put_i32(v.len() as i32);
                        b.put_slice(v.as_bytes());
                    }
                    None => b.put_i32(-1),
                }
            }
            b.put_i16(0);
        })
    }

    pub fn describe_portal(&mut self, portal: &str) -> &mut Self {
        self.msg(b'D', |b| {
            b.put_u8(b'P');
            cstr(b, portal);
        })
    }

    pub fn describe_statement(&mut self, stmt: &str) -> &mut Self {
        self.msg(b'D', |b| {
            b.put_u8(b'S');
            cstr(b, stmt);
        })
    }

    /// Close of a statement (`kind` 'S') or portal ('P').
    pub fn close(&mut self, kind: char, name: &str) -> &mut Self {
        self.msg(b'C', |b| {
            b.put_u8(kind as u8);
            cstr(b, name);
        })
    }

    pub fn execute(&mut self, portal: &str, max_rows: i32) -> &mut Self {
        self.msg(b'E', |b| {
            cstr(b, portal);
            b.put_i32(max_rows);
        })
    }

    pub fn flush(&mut self) -> &mut Self {
        self.msg(b'H', |_| {})
    }

    pub fn sync(&mut self) -> &mut Self {
        self.msg(b'S', |_| {})
    }

    /// CopyData carrying `data` as it is.
    pub fn copy_data(&mut self, data: &[u8]) -> &mut Self {
        self.msg(b'd', |b| b.put_slice(data))
    }

    pub fn copy_done(&mut self) -> &mut Self {
        self.msg(b'c', |_| {})
    }

    /// CopyFail with the client's reason.
    pub fn copy_fail(&mut self, why: &str) -> &mut Self {
        self.msg(b'f', |b| cstr(b, why))
    }

    /// `Parse? Bind Describe Execute` of `sql` with the unnamed statement
    /// and portal: a single read as psycopg sends it (without the Flush).
    pub fn read_batch(&mut self, sql: &str) -> &mut Self {
        self.parse("", sql)
            .bind("", "", &[])
            .describe_portal("")
            .execute("", 0)
    }

    /// Writes everything queued, as one write.
    pub async fn send(&mut self) {
        let out = self.out.split();
        self.stream.write_all(&out).await.expect("send");
    }

    /// The first message read, when it is whole.
    fn whole(&mut self) -> Option<Msg> {
        if self.buf.len() < 5 {
            return None;
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if self.buf.len() <= len {
            return None;
        }
        let m = self.buf.split_to(len + 1);
        Some(Msg {
            tag: m[0] as char,
            body: m[5..].to_vec(),
        })
    }

    /// Reads one message.
    pub async fn next(&mut self) -> Msg {
        loop {
            if let Some(m) = self.whole() {
                return m;
            }
            let n = tokio::time::timeout(
                std::time::Duration::from_secs(30),
                self.stream.read_buf(&mut self.buf),
            )
            .await
            .expect("answer within 30 s")
            .expect("read");
            assert!(n > 0, "connection closed; had {:?}", self.buf);
        }
    }

    /// Reads messages up to and including the first with tag `until`.
    pub async fn until(&mut self, until: char) -> Vec<Msg> {
        let mut v = Vec::new();
        loop {
            let m = self.next().await;
            let done = m.tag == until;
            v.push(m);
            if done {
                return v;
            }
        }
    }

    pub async fn until_ready(&mut self) -> Vec<Msg> {
        self.until('Z').await
    }

    /// Sends what is queued and reads up to `until`.
    pub async fn round_trip(&mut self, until: char) -> Vec<Msg> {
        self.send().await;
        self.until(until).await
    }

    /// Reads whatever arrives within `wait` (to check that nothing does).
    pub async fn drain_for(&mut self, wait: std::time::Duration) -> Vec<Msg> {
        let mut v = Vec::new();
        while let Ok(m) = tokio::time::timeout(wait, self.next_opt()).await {
            match m {
                Some(m) => v.push(m),
                None => break,
            }
        }
        v
    }

    async fn next_opt(&mut self) -> Option<Msg> {
        Some(self.next().await)
    }

    /// Queues a Terminate, the connection kept open to read what comes.
    pub fn goodbye(&mut self) -> &mut Self {
        self.msg(b'X', |_| {})
    }

    /// Reads every message until the other side closes the connection.
    pub async fn until_closed(&mut self) -> Vec<Msg> {
        let mut v = Vec::new();
        loop {
            if let Some(m) = self.whole() {
                v.push(m);
                continue;
            }
            let read = self.stream.read_buf(&mut self.buf);
            let n = tokio::time::timeout(std::time::Duration::from_secs(30), read)
                .await
                .expect("closed within 30 s");
            // A reset after the last message counts as closed too.
            if !matches!(n, Ok(n) if n > 0) {
                return v;
            }
        }
    }

    pub async fn terminate(mut self) {
        self.msg(b'X', |_| {});
        self.send().await;
    }
}
