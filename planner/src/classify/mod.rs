//! Statement classification for coalescing (DESIGN.md, "Coalescing a single-read batch").
