//! Times one halo pack case against a memcpy of the same bytes, both cold, on the CPU (a
//! profiling aid: `cargo run --release -p gpubuf-halo --example pack -- c192_rot1`; cases
//! as in `gpubuf bench halo`). `EDGES=NS` packs only some edges, `REPS=n` sets the
//! repetitions (50), `SEGS=1` prints the first compiled segments.
use gpubuf_buffer::{Buffer, NDBuffer};
use gpubuf_core::{Backend, DType, Error, Order, Result};
use gpubuf_cpu::CpuBackend;
use gpubuf_halo::{Boundary, Dim, HaloDataTransformer, HaloExchangeSpec, QuantityHaloSpec};
use std::time::Instant;

fn main() -> Result<()> {
    let case = std::env::args().nth(1).unwrap_or_else(|| "c192_rot1".into());
    let (quantities, n, rotation, vector) = match case.as_str() {
        "c192_rot0" => (8, 192, 0, false),
        "c192_vec_rot1" => (8, 192, 1, true),
        "c48_q30" => (30, 48, 0, false),
        "c192_rot1" => (8, 192, 1, false),
        other => {
            return Err(Error::invalid(format!(
                "unknown case {other}: c192_rot0, c192_rot1, c192_vec_rot1, c48_q30"
            )))
        }
    };
    let b = CpuBackend::new();
    let s = b.default_stream();
    let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y, Dim::Z], &[n, n, 80], 3, 0, DType::F64)?;
    let pairs = if vector { quantities / 2 } else { quantities };
    let arrays: Vec<NDBuffer<CpuBackend, f64>> = (0..quantities)
        .map(|k| NDBuffer::create(&b, &spec.shape, Order::C, Some(k as f64 + 0.5)))
        .collect::<Result<_>>()?;
    let (mut sx, mut qx, mut qy) = (Vec::new(), Vec::new(), Vec::new());
    for p in 0..pairs {
        let only = std::env::var("EDGES").unwrap_or_else(|_| "NSEW".into());
        for (c, e) in
            [('N', Boundary::North), ('S', Boundary::South), ('E', Boundary::East), ('W', Boundary::West)]
        {
            if !only.contains(c) {
                continue;
            }
            sx.push(HaloExchangeSpec::for_boundary(spec.clone(), e, rotation)?);
            qx.push(&arrays[p]);
            if vector {
                qy.push(&arrays[pairs + p]);
            }
        }
    }
    let sy = vector.then(|| sx.clone());
    let mut t = HaloDataTransformer::<CpuBackend, f64>::new(&b, sx, sy)?;
    let ys = vector.then_some(qy.as_slice());
    if std::env::var("SEGS").is_ok() {
        for seg in t.compiled().pack.segments().iter().take(8) {
            println!("{seg:?}");
        }
    }
    let bytes = t.buffer_len() * 8;
    let (src, dst) = (Buffer::<CpuBackend>::zeros(&b, bytes)?, Buffer::<CpuBackend>::zeros(&b, bytes)?);
    let scratch = Buffer::<CpuBackend>::zeros(&b, 128 << 20)?;
    let reps: usize = match std::env::var("REPS") {
        Err(_) => 50,
        Ok(r) => r
            .parse()
            .ok()
            .filter(|&r| r > 0)
            .ok_or_else(|| Error::invalid(format!("REPS={r}: a positive count")))?,
    };
    let (mut copy, mut pack) = (Vec::new(), Vec::new());
    for round in 0..reps {
        for k in 0..2 {
            scratch.fill(&[round as u8])?;
            let t0 = Instant::now();
            if k == 0 {
                b.copy(s, src.memref(), dst.memory(), 0)?;
            } else {
                t.async_pack(&qx, ys)?;
                t.synchronize()?;
            }
            let secs = t0.elapsed().as_secs_f64();
            if k == 0 {
                copy.push(secs)
            } else {
                pack.push(secs)
            }
        }
    }
    for v in [&mut copy, &mut pack] {
        v.sort_by(f64::total_cmp);
    }
    let gb = |t: f64| bytes as f64 / t / 1e9;
    let (c, p) = (gb(copy[reps / 2]), gb(pack[reps / 2]));
    println!("{case}: {bytes} bytes, memcpy {c:.2} GB/s, pack {p:.2} GB/s, ratio {:.3}", p / c);
    Ok(())
}
