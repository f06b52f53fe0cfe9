//! The hand-loop baseline: the same elements as a plan gather, in array order, and a
//! scatter that undoes its gather.

use gpubuf_core::{Allocator, Backend, CopyPlan, DType, Kernels, MemRef, Segment};
use gpubuf_cpu::{baseline, CpuBackend, CpuMemory};

fn u32s(cpu: &CpuBackend, m: &CpuMemory, n: usize) -> Vec<u32> {
    let mut b = vec![0u8; n * 4];
    cpu.read(cpu.default_stream(), m, 0, &mut b).unwrap();
    b.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn array(cpu: &CpuBackend, n: usize, base: u32) -> CpuMemory {
    let m = cpu.allocate(n * 4).unwrap();
    let v: Vec<u8> = (0..n as u32).flat_map(|k| (base + k).to_le_bytes()).collect();
    cpu.write(cpu.default_stream(), &m, 0, &v).unwrap();
    m
}

/// Two 6 x 5 x 4 arrays; boxes unrotated, flipped, rotated (axes swapped, one negated) and
/// strided, with rows dense enough to fold. `big` repeats the boxes to pass the serial
/// threshold.
fn plan(big: bool) -> CopyPlan {
    let mut segs = vec![
        // Unrotated: 2 x 3 x 4 from (1, 1, 0): rows of 12 dense elements.
        Segment::new(0, 24, &[(2, 20), (3, 4), (4, 1)], 0).unwrap(),
        // Rotated: x and y swapped, x reversed.
        Segment::new(1, 4 * 20 + 4, &[(3, 4), (2, -20), (4, 1)], 24).unwrap(),
        // Flipped innermost and a stride-2 column: single-element rows.
        Segment::new(0, 3, &[(5, 4), (2, -2)], 48).unwrap(),
        // Two outer axes that do not fold: rows of 2 at a stride of 8, then of 40.
        Segment::new(1, 0, &[(2, 40), (2, 8), (2, 1)], 58).unwrap(),
    ];
    let mut len = 66;
    if big {
        // Many copies of one whole-array box: 1 MiB of u32 in all.
        for k in 0..2200 {
            segs.push(Segment::new(k % 2, 0, &[(120, 1)], len).unwrap());
            len += 120;
        }
    }
    CopyPlan::new(vec![120, 120], len, segs).unwrap()
}

#[test]
fn row_gather_moves_each_box_in_array_order() {
    let cpu = CpuBackend::new();
    // The parallel size is compiled to the serial path under Miri, and slow there.
    let sizes: &[bool] = if cfg!(miri) { &[false] } else { &[false, true] };
    for &big in sizes {
        let p = plan(big);
        let (a, b) = (array(&cpu, 120, 0), array(&cpu, 120, 1000));
        let (hand, exec) =
            (cpu.allocate(p.buffer_len() * 4).unwrap(), cpu.allocate(p.buffer_len() * 4).unwrap());
        let srcs = [MemRef::whole(&a), MemRef::whole(&b)];
        baseline::row_gather(&p, DType::U32, &srcs, MemRef::whole(&hand)).unwrap();
        let prepared = cpu.prepare(&p, DType::U32).unwrap();
        cpu.gather(cpu.default_stream(), &prepared, &srcs, MemRef::whole(&exec)).unwrap();
        let (h, e) = (u32s(&cpu, &hand, p.buffer_len()), u32s(&cpu, &exec, p.buffer_len()));
        // Unrotated boxes and the repeated whole arrays: the plan's own bytes.
        assert_eq!(h[..24], e[..24]);
        assert_eq!(h[58..], e[58..]);
        // Rotated and flipped boxes: the same elements, ascending in the array.
        for r in [24..48, 48..58] {
            let mut want = e[r.clone()].to_vec();
            want.sort_unstable();
            assert_eq!(h[r], want[..]);
        }
    }
}

#[test]
fn row_scatter_undoes_row_gather_and_checks_its_arguments() {
    let cpu = CpuBackend::new();
    let s = cpu.default_stream();
    let p = plan(false);
    let (a, b) = (array(&cpu, 120, 0), array(&cpu, 120, 1000));
    let srcs = [MemRef::whole(&a), MemRef::whole(&b)];
    // The hand loop's gather then scatter puts every box element back where it was, as
    // the executor's does.
    let (hand, exec) = (cpu.allocate(66 * 4).unwrap(), cpu.allocate(66 * 4).unwrap());
    baseline::row_gather(&p, DType::U32, &srcs, MemRef::whole(&hand)).unwrap();
    let (za, zb) = (cpu.allocate(480).unwrap(), cpu.allocate(480).unwrap());
    baseline::row_scatter(&p, DType::U32, MemRef::whole(&hand), &[MemRef::whole(&za), MemRef::whole(&zb)])
        .unwrap();
    let prepared = cpu.prepare(&p, DType::U32).unwrap();
    cpu.gather(s, &prepared, &srcs, MemRef::whole(&exec)).unwrap();
    let (ea, eb) = (cpu.allocate(480).unwrap(), cpu.allocate(480).unwrap());
    cpu.scatter(s, &prepared, MemRef::whole(&exec), &[MemRef::whole(&ea), MemRef::whole(&eb)]).unwrap();
    assert_eq!(u32s(&cpu, &za, 120), u32s(&cpu, &ea, 120));
    assert_eq!(u32s(&cpu, &zb, 120), u32s(&cpu, &eb, 120));
    assert_eq!(u32s(&cpu, &za, 120).iter().filter(|&&v| v != 0).count(), 34, "the two boxes of array 0");
    // Wrong source count, a short buffer, and a scatter that writes an element twice are
    // refused before anything is written.
    let buf = cpu.allocate(66 * 4).unwrap();
    assert!(baseline::row_gather(&p, DType::U32, &[MemRef::whole(&a)], MemRef::whole(&buf)).is_err());
    assert!(baseline::row_gather(&p, DType::U32, &srcs, MemRef::new(&buf, 0, 8).unwrap()).is_err());
    let twice = CopyPlan::new(
        vec![120],
        8,
        vec![Segment::new(0, 0, &[(4, 1)], 0).unwrap(), Segment::new(0, 0, &[(4, 1)], 4).unwrap()],
    )
    .unwrap();
    let before = u32s(&cpu, &a, 120);
    let from = MemRef::new(&buf, 0, 32).unwrap();
    assert!(baseline::row_scatter(&twice, DType::U32, from, &[MemRef::whole(&a)]).is_err());
    assert_eq!(u32s(&cpu, &a, 120), before);
}
