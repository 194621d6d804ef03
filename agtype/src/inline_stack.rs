//! A stack that keeps its first `N` items inline and spills to the heap only
//! beyond that, so walking shallow values never allocates.

pub(crate) struct InlineStack<T: Copy + Default, const N: usize> {
    inline: [T; N],
    inline_len: usize,
    spill: Vec<T>,
}

impl<T: Copy + Default, const N: usize> InlineStack<T, N> {
    pub(crate) fn new() -> Self {
        InlineStack {
            inline: [T::default(); N],
            inline_len: 0,
            spill: Vec::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.inline_len + self.spill.len()
    }

    pub(crate) fn push(&mut self, item: T) {
        if self.inline_len < N {
            self.inline[self.inline_len] = item;
            self.inline_len += 1;
        } else {
            self.spill.push(item);
        }
    }

    pub(crate) fn pop(&mut self) -> Option<T> {
        if let Some(item) = self.spill.pop() {
            return Some(item);
        }
        self.inline_len = self.inline_len.checked_sub(1)?;
        Some(self.inline[self.inline_len])
    }

    pub(crate) fn last_mut(&mut self) -> Option<&mut T> {
        if !self.spill.is_empty() {
            return self.spill.last_mut();
        }
        let top = self.inline_len.checked_sub(1)?;
        self.inline.get_mut(top)
    }

    /// Whether items have spilled to the heap.
    #[cfg(test)]
    pub(crate) fn spilled(&self) -> bool {
        !self.spill.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::InlineStack;

    #[test]
    fn spills_past_inline_capacity_and_pops_in_order() {
        let mut s: InlineStack<u32, 2> = InlineStack::new();
        for i in 0..5 {
            s.push(i);
        }
        assert!(s.spilled());
        assert_eq!(s.len(), 5);
        *s.last_mut().unwrap() = 40;
        let popped: Vec<_> = std::iter::from_fn(|| s.pop()).collect();
        assert_eq!(popped, [40, 3, 2, 1, 0]);
        assert!(s.last_mut().is_none());
    }
}
