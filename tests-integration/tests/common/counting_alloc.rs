//! The test kit's counting allocator (`tests/kit/counting_alloc.rs`), under the path some test
//! files still include it by.
#![allow(unused_imports)]

#[path = "../kit/counting_alloc.rs"]
mod inner;

pub use inner::*;
