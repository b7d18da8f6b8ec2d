//! Bounded capture of a child's output stream: head and tail kept, the middle cut out.
//!
//! Architecture invariant: memory per stream never exceeds the cap (plus one read buffer),
//! whatever the child writes.

/// The captured bytes of one stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// Head, a marker line when the middle was cut, and tail.
    pub bytes: Vec<u8>,
    pub truncated: bool,
    /// Bytes the child wrote, before truncation.
    pub total: u64,
}

/// Accumulates a stream under a cap of `cap` kept bytes: the first half of the cap as the head,
/// the last bytes seen in a ring buffer as the tail.
#[derive(Debug)]
pub(crate) struct Capture {
    head: Vec<u8>,
    head_cap: usize,
    /// Fills up to `tail_cap`, then wraps: the oldest byte is at `tail_start`.
    tail: Vec<u8>,
    tail_cap: usize,
    tail_start: usize,
    total: u64,
}

impl Capture {
    pub(crate) fn new(cap: u64) -> Capture {
        let cap = usize::try_from(cap).unwrap_or(usize::MAX);
        let head_cap = cap - cap / 2;
        Capture { head: Vec::new(), head_cap, tail: Vec::new(), tail_cap: cap / 2, tail_start: 0, total: 0 }
    }

    /// Bytes kept in the head so far: the head is always the start of the result's bytes,
    /// whatever comes later, so these (and only these) may be shown before the stream ends.
    pub(crate) fn head_len(&self) -> usize {
        self.head.len()
    }

    /// Takes `data` in; returns how many of its first bytes went to the head (see
    /// [`Capture::head_len`]).
    pub(crate) fn push(&mut self, mut data: &[u8]) -> usize {
        self.total += data.len() as u64;
        let room = self.head_cap - self.head.len();
        let to_head = room.min(data.len());
        if to_head > 0 {
            self.head.extend_from_slice(&data[..to_head]);
            data = &data[to_head..];
        }
        let cap = self.tail_cap;
        if data.is_empty() || cap == 0 {
            return to_head;
        }
        if data.len() >= cap {
            self.tail.clear();
            self.tail.extend_from_slice(&data[data.len() - cap..]);
            self.tail_start = 0;
            return to_head;
        }
        // Fill the ring first, then overwrite its oldest bytes.
        let fill = (cap - self.tail.len()).min(data.len());
        self.tail.extend_from_slice(&data[..fill]);
        let rest = &data[fill..];
        if rest.is_empty() {
            return to_head;
        }
        let first = rest.len().min(cap - self.tail_start);
        self.tail[self.tail_start..self.tail_start + first].copy_from_slice(&rest[..first]);
        self.tail[..rest.len() - first].copy_from_slice(&rest[first..]);
        self.tail_start = (self.tail_start + rest.len()) % cap;
        to_head
    }

    pub(crate) fn finish(self) -> Captured {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let omitted = self.total - kept;
        let mut bytes = self.head;
        if omitted > 0 {
            bytes.extend_from_slice(format!("\n[... cordon: {omitted} bytes omitted ...]\n").as_bytes());
        }
        bytes.extend_from_slice(&self.tail[self.tail_start..]);
        bytes.extend_from_slice(&self.tail[..self.tail_start]);
        Captured { bytes, truncated: omitted > 0, total: self.total }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let mut c = Capture::new(10);
        c.push(b"hello");
        c.push(b"world");
        assert_eq!(c.finish(), Captured { bytes: b"helloworld".to_vec(), truncated: false, total: 10 });
    }

    #[test]
    fn middle_is_cut_and_marked() {
        let mut c = Capture::new(6);
        for chunk in [&b"abcd"[..], b"efgh", b"ijkl"] {
            c.push(chunk);
        }
        let out = c.finish();
        assert!(out.truncated);
        assert_eq!(out.total, 12);
        assert_eq!(out.bytes, b"abc\n[... cordon: 6 bytes omitted ...]\njkl".to_vec());
    }

    #[test]
    fn huge_chunk_keeps_only_its_end_in_the_tail() {
        let mut c = Capture::new(4);
        c.push(&[b'x'; 1000]);
        c.push(b"yz");
        let out = c.finish();
        assert!(out.bytes.starts_with(b"xx\n"));
        assert!(out.bytes.ends_with(b"\nyz"));
        assert_eq!(out.total, 1002);
    }

    #[test]
    fn ring_wraps_in_order() {
        let mut c = Capture::new(8);
        for chunk in [&b"HEAD"[..], b"abc", b"def", b"ghi", b"j"] {
            c.push(chunk);
        }
        let out = c.finish();
        assert_eq!(out.bytes, b"HEAD\n[... cordon: 6 bytes omitted ...]\nghij".to_vec());
        // Every split of the same input yields the same capture.
        let input: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
        let whole = {
            let mut c = Capture::new(100);
            c.push(&input);
            c.finish()
        };
        for size in [1, 7, 49, 50, 51, 99, 100, 333] {
            let mut c = Capture::new(100);
            for chunk in input.chunks(size) {
                c.push(chunk);
            }
            assert_eq!(c.finish(), whole, "chunk size {size}");
        }
    }

    #[test]
    fn cap_of_one_keeps_the_first_byte() {
        let mut c = Capture::new(1);
        c.push(b"abc");
        let out = c.finish();
        assert!(out.bytes.starts_with(b"a\n[... cordon: 2 bytes omitted"));
    }

    /// What `push` reports as head bytes, in order, is exactly a prefix of the result, for any
    /// split and any size against the cap: what the live view shows is never contradicted.
    #[test]
    fn head_bytes_are_a_prefix_of_the_result() {
        let input: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
        for cap in [0, 1, 2, 99, 100, 4999, 5000, 5001, 20_000] {
            for size in [1, 7, 50, 333, 5000] {
                let mut c = Capture::new(cap);
                let mut shown = Vec::new();
                for chunk in input.chunks(size) {
                    assert_eq!(c.head_len(), shown.len());
                    let n = c.push(chunk);
                    shown.extend_from_slice(&chunk[..n]);
                }
                let out = c.finish();
                assert!(out.bytes.starts_with(&shown), "cap {cap}, chunk size {size}");
                assert_eq!(shown.len() as u64, (cap - cap / 2).min(5000), "cap {cap}, chunk size {size}");
            }
        }
    }
}
