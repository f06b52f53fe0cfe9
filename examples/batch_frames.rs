//! Batch video frames for a consumer with a double-buffered Bufferizer.
//!
//! A producer "decodes" 3x64x64 f32 frames and appends them; every time the bufferizer is
//! full its `on_full` hook counts a batch, the producer hands the batch to a consumer
//! thread with `take_batch` and keeps appending into the second buffer meanwhile. The
//! consumer reads each batch back and checks every frame's mean.
//!
//! Run: `cargo run -p gpubuf-examples --example batch_frames [-- cpu|opencl]`
//! (OpenCL needs `--features opencl`).

use gpubuf::bufferizer::Bufferizer;
use gpubuf::pool::MemoryPool;
use gpubuf::{with_backend, BackendKind, BackendVisitor, Kernels, Result};
use ndarray::Array3;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

const FRAME: [usize; 3] = [3, 64, 64];
const BATCH: usize = 8;
const FRAMES: usize = 100;

struct Pipeline;

impl BackendVisitor for Pipeline {
    type Output = (usize, usize);

    fn visit<B: Kernels>(self, backend: B) -> Result<(usize, usize)> {
        let pool = MemoryPool::new(backend.clone());
        let full = Arc::new(AtomicUsize::new(0));
        let counter = full.clone();
        let mut frames = Bufferizer::<B, f32>::builder(&backend, &FRAME, BATCH)
            .pool(&pool)
            .on_full(move |_| {
                counter.fetch_add(1, Ordering::SeqCst);
            })
            .build()?;
        let (tx, rx) = mpsc::channel::<(usize, gpubuf::NDBuffer<B, f32>)>();
        let consumer = std::thread::spawn(move || -> Result<usize> {
            let mut checked = 0;
            for (first, batch) in rx {
                let host = batch.to_ndarray()?;
                for (k, frame) in host.outer_iter().enumerate() {
                    let mean = frame.mean().unwrap_or(f32::NAN);
                    assert_eq!(mean, (first + k) as f32, "frame {} arrived intact", first + k);
                    checked += 1;
                }
            }
            Ok(checked)
        });
        let mut first = 0;
        for i in 0..FRAMES {
            let frame = Array3::<f32>::from_elem((FRAME[0], FRAME[1], FRAME[2]), i as f32);
            frames.append(frame.view())?;
            if frames.is_full() || i + 1 == FRAMES {
                let batch = frames.take_batch()?;
                let n = batch.shape()[0];
                if tx.send((first, batch)).is_err() {
                    break;
                }
                first += n;
            }
        }
        drop(tx);
        let checked = consumer.join().unwrap_or_else(|_| Err(gpubuf::Error::invalid("consumer panicked")))?;
        Ok((full.load(Ordering::SeqCst), checked))
    }
}

fn main() -> Result<()> {
    let kind: BackendKind = std::env::args().nth(1).unwrap_or_else(|| "cpu".into()).parse()?;
    let (full_batches, frames) = with_backend(kind, Pipeline)?;
    println!("{kind}: {frames} frames checked by the consumer, {full_batches} full batches of {BATCH}");
    Ok(())
}
