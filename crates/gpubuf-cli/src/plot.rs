//! Images drawn with `plotters`: a benchmark report as bar charts (one panel per unit,
//! each case's value beside its baseline) and the demo's field as a heat map with a colour
//! scale. The file's extension picks the format: `.png` (bitmap) or `.svg`. Text is set in
//! DejaVu Sans, compiled into the binary, so no system font is needed.

use crate::report::{Entry, Report};
use gpubuf::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::path::Path;
use std::sync::OnceLock;

/// The font family every text uses.
const FONT: &str = "sans-serif";
/// Bar colours: the measured value and its baseline.
const MEASURED: RGBColor = RGBColor(59, 111, 182);
const BASELINE: RGBColor = RGBColor(176, 176, 176);
/// Most cells drawn per side of the field (larger fields are sampled).
const MAX_CELLS: usize = 256;

/// The image formats, by file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Png,
    Svg,
}

/// The format `path`'s extension names.
///
/// # Errors
/// [`Error::InvalidArgument`] for another extension.
fn format_of(path: &Path) -> Result<Format> {
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("png") => Ok(Format::Png),
        Some("svg") => Ok(Format::Svg),
        _ => Err(Error::invalid(format!(
            "images are written as PNG or SVG; give a .png or .svg path, not {}",
            path.display()
        ))),
    }
}

/// Checks that `path` names an image format this module writes and can be written (before
/// a long run, whose figures would otherwise be lost to a missing folder or a permission).
///
/// # Errors
/// [`Error::InvalidArgument`] for another extension, or a path that cannot be opened for
/// writing (named, with the system's reason).
pub fn check_path(path: &Path) -> Result<()> {
    format_of(path)?;
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| Error::invalid(format!("cannot write {}: {e}", path.display())))?;
    if !existed {
        // Made only to find out: the image is written after the run.
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Registers the embedded font once.
fn font() -> Result<()> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok());
    if ok {
        Ok(())
    } else {
        Err(Error::invalid("the embedded font could not be loaded"))
    }
}

/// Something drawn on any plotters backend.
trait Picture {
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32);
    /// Draws on `root`; errors as text.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> std::result::Result<(), String>;
}

/// Any error as text.
fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Draws `picture` into `path`, in the format its extension names.
fn render(path: &Path, picture: &impl Picture) -> Result<()> {
    let format = format_of(path)?;
    font()?;
    let failed = |e: String| Error::invalid(format!("drawing {}: {e}", path.display()));
    match format {
        Format::Png => {
            let root = BitMapBackend::new(path, picture.size()).into_drawing_area();
            picture.draw(&root).map_err(failed)?;
            root.present().map_err(|e| failed(text(e)))
        }
        Format::Svg => {
            let root = SVGBackend::new(path, picture.size()).into_drawing_area();
            picture.draw(&root).map_err(failed)?;
            root.present().map_err(|e| failed(text(e)))
        }
    }
}

/// A benchmark report: one panel per unit.
struct Bars<'a> {
    report: &'a Report,
    /// The units in order of first appearance, with their entries.
    panels: Vec<(&'a str, Vec<&'a Entry>)>,
}

/// Pixels per entry and around each panel.
const ROW: u32 = 44;
const PANEL_EXTRA: u32 = 90;
const WIDTH: u32 = 960;

impl<'a> Bars<'a> {
    fn new(report: &'a Report) -> Self {
        let mut panels: Vec<(&str, Vec<&Entry>)> = Vec::new();
        for e in &report.results {
            match panels.iter_mut().find(|p| p.0 == e.unit) {
                Some(p) => p.1.push(e),
                None => panels.push((&e.unit, vec![e])),
            }
        }
        Bars { report, panels }
    }

    fn panel_height(entries: usize) -> u32 {
        PANEL_EXTRA + ROW * u32::try_from(entries).unwrap_or(u32::MAX / ROW).min(10_000)
    }
}

impl Picture for Bars<'_> {
    fn size(&self) -> (u32, u32) {
        let h = self.panels.iter().map(|p| Self::panel_height(p.1.len())).sum::<u32>();
        (WIDTH, 40 + h.max(PANEL_EXTRA))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> std::result::Result<(), String> {
        root.fill(&WHITE).map_err(text)?;
        let r = self.report;
        let title = format!("gpubuf bench {} on {} ({})", r.bench, r.backend, r.device);
        let mut rest = root.titled(&title, (FONT, 20)).map_err(text)?;
        for (unit, entries) in &self.panels {
            let (panel, below) = rest.split_vertically(Self::panel_height(entries.len()));
            rest = below;
            draw_panel(&panel, unit, entries)?;
        }
        Ok(())
    }
}

/// One unit's panel: per entry its name, the value bar (with the figure and the ratio)
/// and the baseline bar beneath it; the first entry at the top.
fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    unit: &str,
    entries: &[&Entry],
) -> std::result::Result<(), String> {
    let n = entries.len() as f64;
    let max = entries
        .iter()
        .map(|e| e.value.max(e.baseline.unwrap_or(0.0)))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let top = if max > 0.0 { max * 1.45 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(8)
        .build_cartesian_2d(0.0..top, 0.0..n)
        .map_err(text)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc(unit)
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .draw()
        .map_err(text)?;
    let slot = |k: usize| n - 1.0 - k as f64;
    let clamp = |v: f64| if v.is_finite() { v.clamp(0.0, top) } else { 0.0 };
    chart
        .draw_series(entries.iter().enumerate().map(|(k, e)| {
            let y = slot(k);
            Rectangle::new([(0.0, y + 0.32), (clamp(e.value), y + 0.56)], MEASURED.filled())
        }))
        .map_err(text)?
        .label("measured")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], MEASURED.filled()));
    chart
        .draw_series(entries.iter().enumerate().filter_map(|(k, e)| {
            let y = slot(k);
            e.baseline.map(|b| Rectangle::new([(0.0, y + 0.08), (clamp(b), y + 0.28)], BASELINE.filled()))
        }))
        .map_err(text)?
        .label("baseline")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], BASELINE.filled()));
    chart
        .draw_series(entries.iter().enumerate().flat_map(|(k, e)| {
            let y = slot(k);
            let figure = match e.ratio {
                Some(r) => format!("{:.3} {} (x{r:.2})", e.value, e.unit),
                None => format!("{:.3} {}", e.value, e.unit),
            };
            [
                Text::new(e.name.clone(), (0.0, y + 0.95), (FONT, 13).into_font()),
                Text::new(figure, (clamp(e.value) + top * 0.01, y + 0.6), (FONT, 12).into_font()),
            ]
        }))
        .map_err(text)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FONT, 12))
        .draw()
        .map_err(text)
}

/// Writes `report` as bar charts to `path` (`.png` or `.svg`).
///
/// # Errors
/// [`Error::InvalidArgument`] for another extension, a drawing or an I/O failure.
pub fn write_report(report: &Report, path: &Path) -> Result<()> {
    render(path, &Bars::new(report))
}

/// The demo's field: `n` x `n` values, row-major with y outer, drawn with y up.
struct Field<'a> {
    values: &'a [f64],
    n: usize,
    title: &'a str,
}

/// Field pixels per side; the colour scale's width.
const FIELD_PX: u32 = 560;
const SCALE_PX: u32 = 130;

/// A colour-scale label: plain decimals for ordinary magnitudes, else scientific.
fn label(v: &f64) -> String {
    let a = v.abs();
    if a == 0.0 || (1e-3..1e5).contains(&a) {
        format!("{v:.4}")
    } else {
        format!("{v:.3e}")
    }
}

/// Blue (0) through green to red (1).
fn colour(v: f64) -> RGBColor {
    let v = if v.is_finite() { v.clamp(0.0, 1.0) } else { 0.0 };
    let byte = |x: f64| (255.0 * x).round().clamp(0.0, 255.0) as u8;
    RGBColor(byte(v), byte(1.0 - (2.0 * v - 1.0).abs()), byte(1.0 - v))
}

impl Picture for Field<'_> {
    fn size(&self) -> (u32, u32) {
        (FIELD_PX + SCALE_PX, FIELD_PX + 40)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> std::result::Result<(), String> {
        root.fill(&WHITE).map_err(text)?;
        let area = root.titled(self.title, (FONT, 18)).map_err(text)?;
        let (left, right) = area.split_horizontally(FIELD_PX);
        let n = self.n;
        let step = n.div_ceil(MAX_CELLS).max(1);
        let cells = n.div_ceil(step);
        let finite = self.values.iter().copied().filter(|v| v.is_finite());
        let (lo, hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| (l.min(v), h.max(v)));
        let (lo, hi) = if lo <= hi { (lo, hi) } else { (0.0, 1.0) };
        let span = (hi - lo).max(1e-12);
        let mut chart = ChartBuilder::on(&left)
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(44)
            .build_cartesian_2d(0..n, 0..n)
            .map_err(text)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("x")
            .y_desc("y")
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 13))
            .draw()
            .map_err(text)?;
        let values = self.values;
        chart
            .draw_series((0..cells).flat_map(|cy| (0..cells).map(move |cx| (cx, cy))).map(|(cx, cy)| {
                let (x, y) = (cx * step, cy * step);
                let v = values.get(y * n + x).copied().unwrap_or(f64::NAN);
                let (x1, y1) = ((x + step).min(n), (y + step).min(n));
                Rectangle::new([(x, y), (x1, y1)], colour((v - lo) / span).filled())
            }))
            .map_err(text)?;
        // The colour scale: 100 bands from lo to hi, labelled in field units.
        let mut scale = ChartBuilder::on(&right)
            .margin(8)
            .margin_left(10)
            .margin_right(4)
            .x_label_area_size(30)
            .right_y_label_area_size(76)
            .build_cartesian_2d(0.0..1.0, lo..lo + span)
            .map_err(text)?;
        scale
            .configure_mesh()
            .disable_mesh()
            .x_labels(0)
            .y_labels(8)
            .y_label_formatter(&label)
            .label_style((FONT, 11))
            .draw()
            .map_err(text)?;
        scale
            .draw_series((0..100).map(|k| {
                let (a, b) = (k as f64 / 100.0, (k + 1) as f64 / 100.0);
                Rectangle::new([(0.0, lo + span * a), (1.0, lo + span * b)], colour(a).filled())
            }))
            .map_err(text)?;
        Ok(())
    }
}

/// Writes the field (`n * n` values, row-major, y outer) as a heat map with a colour scale
/// and `title` to `path` (`.png` or `.svg`); at most 256 x 256 cells are drawn (larger
/// fields are sampled).
///
/// # Errors
/// [`Error::ShapeMismatch`] when `field` does not hold `n * n` values;
/// [`Error::InvalidArgument`] for another extension, a drawing or an I/O failure.
pub fn write_field(path: &Path, field: &[f64], n: usize, title: &str) -> Result<()> {
    if n.checked_mul(n) != Some(field.len()) || n == 0 {
        return Err(Error::ShapeMismatch { expected: vec![n, n], got: vec![field.len()] });
    }
    render(path, &Field { values: field, n, title })
}
