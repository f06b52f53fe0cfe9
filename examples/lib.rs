//! Runnable examples for gpubuf; see the files beside this one
//! (`cargo run -p gpubuf-examples --example batch_frames`).
