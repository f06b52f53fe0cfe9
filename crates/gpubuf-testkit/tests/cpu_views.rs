//! ndarray views of CPU `NDBuffer`s that share one allocation (a pool segment): every
//! public way to view them addresses the array's own bytes, never the segment's start.

use gpubuf::cpu::{with_array, with_array_mut, CpuBackend, CpuView};
use gpubuf::{MemoryPool, NDBuffer, Order, Result};
use std::sync::Arc;

/// Two 2x3 arrays carved from one pool segment, the second one not at its start.
fn two_from_one_segment(
    cpu: &CpuBackend,
    pool: &MemoryPool<CpuBackend>,
) -> Result<[NDBuffer<CpuBackend, f64>; 2]> {
    let a = pool.from_slice(cpu, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
    // The long way a user may also take: a pool block turned into a buffer by hand.
    let b = NDBuffer::from_buffer(pool.allocate(6 * 8)?.into_buffer(cpu)?, &[2, 3], Order::C)?;
    b.write_ndarray(gpubuf::ndarray::arr2(&[[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]]).view())?;
    assert!(Arc::ptr_eq(a.buffer().memory(), b.buffer().memory()), "one segment");
    assert_ne!(a.buffer().offset(), b.buffer().offset());
    Ok([a, b])
}

#[test]
fn views_of_pooled_arrays_are_their_own_bytes() {
    let cpu = CpuBackend::new();
    let pool = MemoryPool::new(cpu.clone());
    let [a, b] = two_from_one_segment(&cpu, &pool).unwrap();
    for x in [&a, &b] {
        assert_eq!(x.view(|v| v.iter().copied().collect::<Vec<_>>()).unwrap(), x.to_vec().unwrap());
        let t = x.transpose(None).unwrap();
        assert_eq!(t.view(|v| v.iter().copied().collect::<Vec<_>>()).unwrap(), t.to_vec().unwrap());
    }
    b.view_mut(|mut v| v *= 2.0).unwrap();
    assert_eq!(b.to_vec().unwrap(), vec![20.0, 40.0, 60.0, 80.0, 100.0, 120.0]);
    assert_eq!(a.to_vec().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "a untouched");
    // A flipped slice of the second array: its own elements, in its order.
    let s = b.slice(&[1..2, 0..3]).unwrap().flip(1).unwrap();
    assert_eq!(s.view(|v| v.iter().copied().collect::<Vec<_>>()).unwrap(), vec![120.0, 100.0, 80.0]);
}

#[test]
fn raw_views_take_the_buffer_and_measure_from_it() {
    let cpu = CpuBackend::new();
    let pool = MemoryPool::new(cpu.clone());
    let [a, b] = two_from_one_segment(&cpu, &pool).unwrap();
    with_array_mut::<f64, _>(b.buffer(), b.layout(), |mut v| v += 1.0).unwrap();
    assert_eq!(b.to_vec().unwrap(), vec![11.0, 21.0, 31.0, 41.0, 51.0, 61.0]);
    assert_eq!(a.to_vec().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(with_array::<f64, _>(a.buffer(), a.layout(), |v| v.sum()).unwrap(), 21.0);
    // A layout longer than the buffer is refused even though the segment has room.
    let long = gpubuf::Layout::contiguous(&[7], Order::C).unwrap();
    assert!(matches!(
        with_array::<f64, _>(b.buffer(), &long, |v| v.sum()),
        Err(gpubuf::Error::OutOfBounds { .. })
    ));
    // A buffer that starts inside an element is refused, not viewed from a rounded byte.
    let odd = b.buffer().slice(4..44).unwrap();
    let two = gpubuf::Layout::contiguous(&[2], Order::C).unwrap();
    assert!(matches!(with_array::<f64, _>(&odd, &two, |v| v.sum()), Err(gpubuf::Error::InvalidArgument(_))));
}
