//! `NDBuffer::write_region` on every backend: row gathers and scatters into strided,
//! flipped and transposed views, plans cached per layout and shared by every region of it,
//! and `view_as` over the same bytes.

use gpubuf::buffer::RegionPlans;
use gpubuf::{Error, Kernels, NDBuffer, Order, Result};
use gpubuf_testkit::backend_tests;
use ndarray::{Array2, Array3, ArrayD, Dimension as _};

fn iota(n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|v| v as f32 * scale + 1.0).collect()
}

/// The storage of `whole` after `host` is written element by element into `region`.
fn expected<B: Kernels>(whole: &[f32], region: &NDBuffer<B, f32>, host: &ArrayD<f32>) -> Result<Vec<f32>> {
    let mut out = whole.to_vec();
    for (index, &v) in host.indexed_iter() {
        out[region.layout().index_of(index.slice())?] = v;
    }
    Ok(out)
}

fn region_writes<B: Kernels>(b: &B) -> Result<()> {
    let plans = RegionPlans::new();
    let a = NDBuffer::<B, f32>::zeros(b, &[8, 150])?;
    let mut want = vec![0.0; 1200];
    // Long rows (a row gather), two regions of one layout: one plan.
    for (k, rows) in [1..4, 5..8].into_iter().enumerate() {
        let region = a.slice(&[rows, 20..120])?;
        let host =
            Array2::from_shape_vec((3, 100), iota(300, k as f32 + 1.0)).map_err(Error::from)?.into_dyn();
        region.write_region(host.view(), &plans)?;
        want = expected(&want, &region, &host)?;
    }
    assert_eq!(a.to_vec()?, want);
    assert_eq!(plans.len(), 1);
    // Short, flipped and transposed rows (a scatter), from a strided host array.
    let region = a.slice(&[0..8, 0..6])?.flip(0)?.transpose(None)?;
    let host = Array2::from_shape_vec((8, 6), iota(48, -1.0)).map_err(Error::from)?;
    let host = host.t();
    region.write_region(host, &plans)?;
    want = expected(&want, &region, &host.to_owned().into_dyn())?;
    assert_eq!(a.to_vec()?, want);
    assert_eq!(plans.len(), 2);
    // A 3-d region with a staging array from the caller, and an element written twice.
    let c = NDBuffer::<B, f32>::zeros(b, &[4, 5, 80])?;
    let region = c.slice(&[1..3, 0..5, 8..72])?.flip(1)?;
    let host = Array3::from_shape_vec((2, 5, 64), iota(640, 0.5)).map_err(Error::from)?.into_dyn();
    let mut staged = 0;
    region.write_region_with(host.view(), &plans, |shape| {
        staged += 1;
        NDBuffer::empty(b, shape, Order::C)
    })?;
    assert_eq!(staged, 1);
    assert_eq!(c.to_vec()?, expected(&vec![0.0; 1600], &region, &host)?);
    let twice = NDBuffer::<B, f32>::from_buffer_layout(
        c.buffer().clone(),
        gpubuf::Layout::new(vec![2, 3], vec![0, 2], 0)?,
    )?;
    let err = twice.write_region(Array2::<f32>::ones((2, 3)).view(), &plans);
    assert!(matches!(err, Err(Error::InvalidPlan(_))), "{err:?}");
    // The bytes seen as another type.
    let words = c.slice(&[1..2, 0..5, 0..80])?.view_as::<u32>()?;
    assert_eq!(
        words.to_vec()?,
        c.slice(&[1..2, 0..5, 0..80])?.to_vec()?.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    Ok(())
}

backend_tests!(region_writes);
