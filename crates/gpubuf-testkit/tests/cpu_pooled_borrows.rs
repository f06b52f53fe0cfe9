//! Pooled arrays of a CPU `Device` (the run-time chosen backend) share one segment and are
//! borrowed by their own bytes: a read view of one nests a write view of another, from
//! every pooled constructor, while the same array read and written at once is an error.

use gpubuf::cpu::{with_array, with_array_mut, CpuMemory};
use gpubuf::ndarray::{s, Array2};
use gpubuf::{Backend, Device, Error, Layout, MemoryPool, NDBuffer, Order, Result};
use std::sync::Arc;

const SHAPE: [usize; 2] = [3, 5];

/// The CPU allocation of `a` and `a`'s layout measured from that allocation's first byte.
fn in_allocation(a: &NDBuffer<Device, f32>) -> Result<(&CpuMemory, Layout)> {
    let memory = a.buffer().memory().as_cpu().ok_or_else(|| Error::invalid("not CPU memory"))?;
    let offset = a.buffer().offset() / 4 + a.layout().offset();
    Ok((memory, Layout::new(a.shape().to_vec(), a.strides().to_vec(), offset)?))
}

fn every_pooled(
    device: &Device,
    pool: &MemoryPool<Device>,
) -> Result<Vec<(&'static str, NDBuffer<Device, f32>)>> {
    let data: Vec<f32> = (0..15u8).map(f32::from).collect();
    let host = Array2::from_shape_vec(SHAPE, data.clone()).map_err(|e| Error::invalid(e.to_string()))?;
    let wide = Array2::<f32>::zeros([3, 10]);
    let all = vec![
        ("empty", pool.empty(device, &SHAPE, Order::C)?),
        ("empty F", pool.empty(device, &SHAPE, Order::F)?),
        ("zeros", pool.zeros(device, &SHAPE)?),
        ("full", pool.full(device, &SHAPE, 1.5)?),
        ("from_slice", pool.from_slice(device, &SHAPE, &data)?),
        ("from_ndarray", pool.from_ndarray(device, host.view())?),
        ("from_ndarray strided", pool.from_ndarray(device, wide.slice(s![.., ..;2]))?),
        (
            "allocate + from_buffer",
            NDBuffer::from_buffer(pool.allocate(60)?.into_buffer(device)?, &SHAPE, Order::C)?,
        ),
        (
            "allocate_on + from_buffer_layout",
            NDBuffer::from_buffer_layout(
                pool.allocate_on(60, device, device.default_stream())?.into_buffer(device)?,
                Layout::contiguous(&SHAPE, Order::F)?,
            )?,
        ),
    ];
    for (_, a) in &all {
        let (m, l) = in_allocation(a)?;
        with_array_mut::<f32, _>(m, &l, |mut v| v.iter_mut().zip(&data).for_each(|(x, d)| *x = *d))?;
    }
    Ok(all)
}

#[test]
fn device_pooled_arrays_nest_a_read_view_and_a_write_view() -> Result<()> {
    let device = Device::cpu();
    let pool = MemoryPool::new(device.clone());
    let arrays = every_pooled(&device, &pool)?;
    let segment = arrays[0].1.buffer().memory();
    let base: Vec<f32> = (0..15u8).map(f32::from).collect();
    for (i, (un, u)) in arrays.iter().enumerate() {
        assert!(Arc::ptr_eq(segment, u.buffer().memory()), "{un}: another segment");
        let (um, ul) = in_allocation(u)?;
        for (j, (on, out)) in arrays.iter().enumerate() {
            if i == j {
                continue;
            }
            let (om, ol) = in_allocation(out)?;
            let k = (i * 10 + j) as f32;
            let r = with_array::<f32, _>(um, &ul, |u| {
                with_array_mut::<f32, _>(om, &ol, |mut o| o.zip_mut_with(&u, |o, &u| *o = u - k))
            });
            assert!(matches!(r, Ok(Ok(()))), "{un} read, {on} written: {r:?}");
            let want: Vec<f32> = base.iter().map(|x| x - k).collect();
            assert_eq!(out.to_vec()?, want, "{on}");
            assert_eq!(u.to_vec()?, base, "{un} untouched");
            // A backend write of `out` from inside the read view of `u` works too.
            with_array::<f32, _>(um, &ul, |_| out.copy_from(u))??;
            assert_eq!(out.to_vec()?, base, "{on}");
        }
        // The same array read and written at once: refused, nothing written.
        let r = with_array::<f32, _>(um, &ul, |_| with_array_mut::<f32, _>(um, &ul, |mut v| v.fill(-1.0)));
        assert!(matches!(r, Ok(Err(Error::InvalidArgument(_)))), "{un}: {r:?}");
        let r = with_array_mut::<f32, _>(um, &ul, |_| u.to_vec());
        assert!(matches!(r, Ok(Err(Error::InvalidArgument(_)))), "{un}: {r:?}");
        assert_eq!(u.to_vec()?, base, "{un}");
    }
    assert_eq!(device.kind(), gpubuf::BackendKind::Cpu);
    Ok(())
}
