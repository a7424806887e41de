//! Zero-copy header views (OWNED BY LEAD; in progress).
