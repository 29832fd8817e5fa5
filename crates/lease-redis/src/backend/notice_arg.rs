//! The release scripts' notice argument, written on the stack when it fits.

/// A release notice argument, built on the stack when it fits (a key of up to about a hundred
/// bytes), else on the heap: no allocation on a plain lock's release.
pub(crate) struct NoticeArg {
    inline: [u8; NoticeArg::INLINE],
    heap: Vec<u8>,
}

impl Default for NoticeArg {
    fn default() -> Self {
        NoticeArg {
            inline: [0; NoticeArg::INLINE],
            heap: Vec::new(),
        }
    }
}

impl NoticeArg {
    /// Bytes held on the stack.
    pub(crate) const INLINE: usize = 128;

    /// `parts` concatenated.
    pub(super) fn of(&mut self, parts: &[&str]) -> &[u8] {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len <= Self::INLINE {
            let mut at = 0;
            for p in parts {
                let end = at + p.len();
                if let Some(dst) = self.inline.get_mut(at..end) {
                    dst.copy_from_slice(p.as_bytes());
                }
                at = end;
            }
            return self.inline.get(..len).unwrap_or_default();
        }
        self.heap.clear();
        self.heap.reserve_exact(len);
        for p in parts {
            self.heap.extend_from_slice(p.as_bytes());
        }
        &self.heap
    }
}

#[cfg(test)]
mod tests {
    use super::NoticeArg;

    #[test]
    fn a_notice_argument_is_its_parts_on_the_stack_or_not() {
        let mut buf = NoticeArg::default();
        assert_eq!(
            buf.of(&["p:", "redlease:released:", "k"]),
            b"p:redlease:released:k"
        );
        assert_eq!(buf.of(&[]), b"");
        let long = "x".repeat(NoticeArg::INLINE);
        let want = format!("s:{long}");
        assert_eq!(buf.of(&["s:", "", &long]), want.as_bytes());
        let exact = "y".repeat(NoticeArg::INLINE - 2);
        assert_eq!(buf.of(&["p:", &exact]), format!("p:{exact}").as_bytes());
    }
}
