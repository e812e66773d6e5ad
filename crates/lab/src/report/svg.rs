//! A small SVG plotting module for the report: line plots (linear or log axes) and bar
//! charts (grouped or stacked). No dependency, no script, no font or style fetched from
//! anywhere: every figure is one self-contained `<svg>` element that is also well-formed
//! XML, so the same text goes into `figures/*.svg` and inline into `index.html`.
//!
//! # Design
//!
//! - A figure is described by plain data ([`LinePlot`], [`BarChart`]) and rendered by
//!   [`LinePlot::to_svg`] / [`BarChart::to_svg`] into a fixed 720 × 400 viewBox (it scales
//!   with the page). Text is escaped; the SVG holds no `id` attributes, so any number of
//!   figures can share one HTML page.
//! - Axes: a [`Scale`] maps data to pixels. Linear axes get "nice" ticks (1, 2 or 5 times
//!   a power of ten, [`linear_ticks`]); log axes get a tick at every power of ten, with 2
//!   and 5 between them when the range spans fewer than three decades ([`log_ticks`]).
//!   Axis labels carry the unit, as the caller writes it ("size (bytes)").
//! - Points that cannot be drawn (NaN, infinite, or not positive on a log axis) are left
//!   out, never clamped into a false value. A figure with nothing to draw renders a
//!   placeholder that says so, rather than empty axes or a panic.
//! - Colours come from one fixed palette chosen to stay distinguishable in greyscale
//!   print as well as on screen; the legend names every series.

use std::collections::BTreeMap;
use std::fmt::Write;

/// Width and height of every figure's viewBox, in SVG user units.
pub const WIDTH: f64 = 720.0;
pub const HEIGHT: f64 = 400.0;
/// The plot area's margins: room for the title, tick labels, axis labels and legend.
const LEFT: f64 = 78.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 62.0;

/// Series colours (Okabe-Ito, then two greys' worth of extras).
const PALETTE: [&str; 10] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
    "#999999", "#8C564B",
];

/// The colour of the `i`th series.
pub fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Text made safe for XML character data and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters are not allowed in XML 1.0; drop them.
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

/// How an axis maps data to the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// Base-10 logarithmic: for sizes and rates that span decades.
    Log10,
}

/// One axis: its label (with the unit) and its scale.
#[derive(Clone, Debug)]
pub struct Axis {
    pub label: String,
    pub scale: Scale,
}

impl Axis {
    pub fn linear(label: impl Into<String>) -> Axis {
        Axis {
            label: label.into(),
            scale: Scale::Linear,
        }
    }

    pub fn log(label: impl Into<String>) -> Axis {
        Axis {
            label: label.into(),
            scale: Scale::Log10,
        }
    }
}

/// A named line of (x, y) points.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed: a reference line (memcpy, a paper's figure) rather than a result.
    pub dashed: bool,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            dashed: false,
        }
    }

    pub fn dashed(mut self) -> Series {
        self.dashed = true;
        self
    }
}

/// A line plot.
#[derive(Clone, Debug)]
pub struct LinePlot {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    /// Start a linear y axis at zero (the usual choice for times and rates).
    pub y_from_zero: bool,
}

/// A bar chart: one group of bars per label on the x axis, one bar (or one stacked
/// segment) per series.
#[derive(Clone, Debug)]
pub struct BarChart {
    pub title: String,
    /// What the groups are (with a unit if they have one), under the x axis.
    pub x_label: String,
    /// The y axis label, with the unit.
    pub y_label: String,
    pub groups: Vec<String>,
    /// (series name, one value per group); a missing value is NaN and draws nothing.
    pub series: Vec<(String, Vec<f64>)>,
    /// Stack the series in each group instead of setting them side by side.
    pub stacked: bool,
}

/// A labelled row of (category → value), for [`stacked_bars`].
#[derive(Clone, Debug)]
pub struct LabelledRow {
    pub label: String,
    pub parts: BTreeMap<String, f64>,
}

/// A stacked bar chart from generic rows: one bar per row, one segment per category
/// (every category any row names, in name order; a row without one contributes zero).
/// Receiver CPU breakdowns (paper 004 Fig. 3) and category shares use it.
pub fn stacked_bars(title: &str, x_label: &str, y_label: &str, rows: &[LabelledRow]) -> BarChart {
    let mut categories: Vec<String> = rows.iter().flat_map(|r| r.parts.keys().cloned()).collect();
    categories.sort();
    categories.dedup();
    BarChart {
        title: title.to_string(),
        x_label: x_label.to_string(),
        y_label: y_label.to_string(),
        groups: rows.iter().map(|r| r.label.clone()).collect(),
        series: categories
            .iter()
            .map(|c| {
                let values = rows
                    .iter()
                    .map(|r| r.parts.get(c).copied().unwrap_or(0.0))
                    .collect();
                (c.clone(), values)
            })
            .collect(),
        stacked: true,
    }
}

/// "Nice" ticks covering [lo, hi] on a linear axis: about `want` of them, spaced 1, 2 or
/// 5 times a power of ten, the first at or below `lo` and the last at or above `hi`.
pub fn linear_ticks(lo: f64, hi: f64, want: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) {
        return Vec::new();
    }
    let (lo, hi) = if hi > lo {
        (lo, hi)
    } else {
        // A flat range: open it around the value.
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.5 };
        (lo - pad, lo + pad)
    };
    let raw = (hi - lo) / want.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).floor() * step;
    let mut ticks = Vec::new();
    let mut k = 0;
    loop {
        let t = first + k as f64 * step;
        // Snap values like 0.6000000000000001 to the step's decimal places.
        let scale = 10f64.powi((-step.log10().floor()).max(0.0) as i32);
        let t = (t * scale).round() / scale;
        ticks.push(t);
        if t >= hi - step * 1e-9 || k > 1000 {
            break;
        }
        k += 1;
    }
    ticks
}

/// Ticks on a log axis covering [lo, hi] (both positive): every power of ten from the
/// one at or below `lo` to the one at or above `hi`, and 2 and 5 times each when the
/// range spans fewer than three decades.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi > 0.0 && lo.is_finite() && hi.is_finite()) {
        return Vec::new();
    }
    let (lo, hi) = if hi > lo {
        (lo, hi)
    } else {
        (lo / 10.0, hi * 10.0)
    };
    let first = lo.log10().floor() as i32;
    let last = hi.log10().ceil() as i32;
    let fine = last - first < 3;
    let mut ticks = Vec::new();
    for e in first..=last {
        let p = 10f64.powi(e);
        ticks.push(p);
        if fine && e < last {
            ticks.push(2.0 * p);
            ticks.push(5.0 * p);
        }
    }
    ticks
}

/// A tick label: short, no trailing zeros, thousands as k and millions as M when round.
pub fn tick_label(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        return "0".to_string();
    }
    if a >= 1e6 && (v / 1e6).fract().abs() < 1e-9 {
        return format!("{}M", v / 1e6);
    }
    if a >= 1e4 && (v / 1e3).fract().abs() < 1e-9 {
        return format!("{}k", v / 1e3);
    }
    if a >= 1.0 && v.fract().abs() < 1e-9 {
        return format!("{v:.0}");
    }
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A mapping from data to one pixel range.
#[derive(Clone, Copy, Debug)]
struct Mapping {
    scale: Scale,
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
}

impl Mapping {
    fn new(scale: Scale, lo: f64, hi: f64, from: f64, to: f64) -> Mapping {
        Mapping {
            scale,
            lo,
            hi,
            from,
            to,
        }
    }

    fn map(&self, v: f64) -> f64 {
        let (v, lo, hi) = match self.scale {
            Scale::Linear => (v, self.lo, self.hi),
            Scale::Log10 => (v.log10(), self.lo.log10(), self.hi.log10()),
        };
        let f = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
        self.from + f * (self.to - self.from)
    }
}

/// Whether a value can be drawn on an axis of this scale.
fn drawable(scale: Scale, v: f64) -> bool {
    v.is_finite() && (scale == Scale::Linear || v > 0.0)
}

/// The ticks and the range they span for data in [lo, hi].
fn axis_ticks(scale: Scale, lo: f64, hi: f64, want: usize) -> Vec<f64> {
    match scale {
        Scale::Linear => linear_ticks(lo, hi, want),
        Scale::Log10 => log_ticks(lo, hi),
    }
}

fn open_svg(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" \
         width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\" class=\"figure\" \
         font-family=\"sans-serif\" font-size=\"12\">\
         <title>{}</title>\
         <rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"#ffffff\"/>\
         <text class=\"plot-title\" x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">{}</text>",
        escape(title),
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        escape(title)
    );
}

/// The placeholder a figure without data renders: the frame, the title, and why.
fn placeholder(title: &str, why: &str) -> String {
    let mut out = String::new();
    open_svg(&mut out, title);
    let _ = write!(
        out,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{}\" height=\"{}\" fill=\"#f4f4f4\" stroke=\"#bbbbbb\"/>\
         <text class=\"no-data\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#555555\">{}</text></svg>",
        WIDTH - LEFT - RIGHT,
        HEIGHT - TOP - BOTTOM,
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        TOP + (HEIGHT - TOP - BOTTOM) / 2.0,
        escape(why)
    );
    out
}

/// Axis lines, ticks, grid lines, tick labels and the two axis labels.
fn draw_axes(
    out: &mut String,
    x_label: &str,
    y_label: &str,
    y: &Mapping,
    y_ticks: &[f64],
    x_ticks: &[(f64, String)],
) {
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP);
    for &t in y_ticks {
        let py = y.map(t);
        let _ = write!(
            out,
            "<line x1=\"{x0:.1}\" y1=\"{py:.1}\" x2=\"{x1:.1}\" y2=\"{py:.1}\" stroke=\"#e3e3e3\"/>\
             <line x1=\"{:.1}\" y1=\"{py:.1}\" x2=\"{x0:.1}\" y2=\"{py:.1}\" stroke=\"#333333\"/>\
             <text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            x0 - 5.0,
            x0 - 8.0,
            py + 4.0,
            escape(&tick_label(t))
        );
    }
    for (px, label) in x_ticks {
        let _ = write!(
            out,
            "<line x1=\"{px:.1}\" y1=\"{y0:.1}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"#333333\"/>\
             <text class=\"tick\" x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            y0 + 5.0,
            y0 + 18.0,
            escape(label)
        );
    }
    let _ = write!(
        out,
        "<line x1=\"{x0:.1}\" y1=\"{y0:.1}\" x2=\"{x1:.1}\" y2=\"{y0:.1}\" stroke=\"#333333\"/>\
         <line x1=\"{x0:.1}\" y1=\"{y0:.1}\" x2=\"{x0:.1}\" y2=\"{y1:.1}\" stroke=\"#333333\"/>\
         <text class=\"axis-label x-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
         <text class=\"axis-label y-label\" x=\"16\" y=\"{:.1}\" text-anchor=\"middle\" \
         transform=\"rotate(-90 16 {:.1})\">{}</text>",
        (x0 + x1) / 2.0,
        HEIGHT - 16.0,
        escape(x_label),
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0,
        escape(y_label)
    );
}

/// The legend at the right: a swatch (a line or a box) and a name per series.
fn draw_legend(out: &mut String, entries: &[(String, &'static str, bool)], boxes: bool) {
    let x = WIDTH - RIGHT + 14.0;
    out.push_str("<g class=\"legend\">");
    for (i, (name, colour, dashed)) in entries.iter().enumerate() {
        let y = TOP + 8.0 + 18.0 * i as f64;
        if boxes {
            let _ = write!(
                out,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"14\" height=\"10\" fill=\"{colour}\"/>",
                y - 9.0
            );
        } else {
            let dash = if *dashed {
                " stroke-dasharray=\"5 3\""
            } else {
                ""
            };
            let _ = write!(
                out,
                "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-width=\"2.5\"{dash}/>",
                y - 4.0,
                x + 18.0,
                y - 4.0
            );
        }
        // Long names are cut so they stay inside the figure.
        let shown: String = if name.chars().count() > 26 {
            name.chars().take(25).chain(std::iter::once('…')).collect()
        } else {
            name.clone()
        };
        let _ = write!(
            out,
            "<text class=\"legend-entry\" x=\"{:.1}\" y=\"{y:.1}\">{}</text>",
            x + 24.0,
            escape(&shown)
        );
    }
    out.push_str("</g>");
}

impl LinePlot {
    /// The figure as one `<svg>` element.
    pub fn to_svg(&self) -> String {
        let pts: Vec<Vec<(f64, f64)>> = self
            .series
            .iter()
            .map(|s| {
                s.points
                    .iter()
                    .copied()
                    .filter(|&(x, y)| drawable(self.x.scale, x) && drawable(self.y.scale, y))
                    .collect()
            })
            .collect();
        let all: Vec<(f64, f64)> = pts.iter().flatten().copied().collect();
        if all.is_empty() {
            return placeholder(&self.title, "no data was measured for this figure");
        }
        let fold = |f: fn(&(f64, f64)) -> f64| {
            all.iter()
                .map(f)
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
                    (a.min(v), b.max(v))
                })
        };
        let (xlo, xhi) = fold(|p| p.0);
        let (mut ylo, yhi) = fold(|p| p.1);
        if self.y_from_zero && self.y.scale == Scale::Linear && ylo > 0.0 {
            ylo = 0.0;
        }
        let xt = axis_ticks(self.x.scale, xlo, xhi, 6);
        let yt = axis_ticks(self.y.scale, ylo, yhi, 6);
        let (xa, xb) = (xt[0], xt[xt.len() - 1]);
        let (ya, yb) = (yt[0], yt[yt.len() - 1]);
        let xm = Mapping::new(self.x.scale, xa, xb, LEFT, WIDTH - RIGHT);
        let ym = Mapping::new(self.y.scale, ya, yb, HEIGHT - BOTTOM, TOP);
        let x_ticks: Vec<(f64, String)> = xt.iter().map(|&t| (xm.map(t), tick_label(t))).collect();

        let mut out = String::new();
        open_svg(&mut out, &self.title);
        draw_axes(&mut out, &self.x.label, &self.y.label, &ym, &yt, &x_ticks);
        for (i, (s, p)) in self.series.iter().zip(&pts).enumerate() {
            if p.is_empty() {
                continue;
            }
            let c = colour(i);
            let dash = if s.dashed {
                " stroke-dasharray=\"6 4\""
            } else {
                ""
            };
            let mut d = String::new();
            for (k, &(x, y)) in p.iter().enumerate() {
                let _ = write!(
                    d,
                    "{}{:.1},{:.1}",
                    if k == 0 { "M" } else { " L" },
                    xm.map(x),
                    ym.map(y)
                );
            }
            let _ = write!(
                out,
                "<g class=\"series\"><path d=\"{d}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"2\"{dash}/>"
            );
            for &(x, y) in p {
                let _ = write!(
                    out,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{c}\"/>",
                    xm.map(x),
                    ym.map(y)
                );
            }
            out.push_str("</g>");
        }
        let entries: Vec<(String, &'static str, bool)> = self
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), colour(i), s.dashed))
            .collect();
        draw_legend(&mut out, &entries, false);
        out.push_str("</svg>");
        out
    }
}

impl BarChart {
    /// The figure as one `<svg>` element.
    pub fn to_svg(&self) -> String {
        let value = |s: usize, g: usize| self.series[s].1.get(g).copied().filter(|v| v.is_finite());
        let has_data =
            (0..self.series.len()).any(|s| (0..self.groups.len()).any(|g| value(s, g).is_some()));
        if self.groups.is_empty() || !has_data {
            return placeholder(&self.title, "no data was measured for this figure");
        }
        // The extent of the bars: stacks sum their positive parts (negative parts,
        // which a breakdown should not have, stack downward from zero).
        let (mut lo, mut hi) = (0.0f64, 0.0f64);
        for g in 0..self.groups.len() {
            if self.stacked {
                let (mut pos, mut neg) = (0.0, 0.0);
                for s in 0..self.series.len() {
                    match value(s, g) {
                        Some(v) if v >= 0.0 => pos += v,
                        Some(v) => neg += v,
                        None => {}
                    }
                }
                hi = hi.max(pos);
                lo = lo.min(neg);
            } else {
                for s in 0..self.series.len() {
                    if let Some(v) = value(s, g) {
                        hi = hi.max(v);
                        lo = lo.min(v);
                    }
                }
            }
        }
        let yt = linear_ticks(lo, hi, 6);
        let ym = Mapping::new(Scale::Linear, yt[0], yt[yt.len() - 1], HEIGHT - BOTTOM, TOP);
        let plot_w = WIDTH - LEFT - RIGHT;
        let group_w = plot_w / self.groups.len() as f64;
        let x_ticks: Vec<(f64, String)> = self
            .groups
            .iter()
            .enumerate()
            .map(|(g, name)| (LEFT + group_w * (g as f64 + 0.5), name.clone()))
            .collect();
        let mut out = String::new();
        open_svg(&mut out, &self.title);
        draw_axes(&mut out, &self.x_label, &self.y_label, &ym, &yt, &x_ticks);
        let zero = ym.map(0.0);
        let inner = group_w * 0.8;
        let bar_w = if self.stacked {
            inner
        } else {
            inner / self.series.len().max(1) as f64
        };
        for g in 0..self.groups.len() {
            let gx = LEFT + group_w * g as f64 + group_w * 0.1;
            let (mut pos, mut neg) = (0.0, 0.0);
            for s in 0..self.series.len() {
                let Some(v) = value(s, g) else { continue };
                let (base, top) = if self.stacked {
                    if v >= 0.0 {
                        let b = pos;
                        pos += v;
                        (b, pos)
                    } else {
                        let b = neg;
                        neg += v;
                        (b, neg)
                    }
                } else {
                    (0.0, v)
                };
                let x = if self.stacked {
                    gx
                } else {
                    gx + bar_w * s as f64
                };
                let (ya, yb) = (ym.map(base), ym.map(top));
                let _ = write!(
                    out,
                    "<rect class=\"bar\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}: {}</title></rect>",
                    ya.min(yb),
                    (bar_w - 1.0).max(1.0),
                    (ya - yb).abs(),
                    colour(s),
                    escape(&format!("{} / {}", self.groups[g], self.series[s].0)),
                    escape(&tick_label_value(v))
                );
            }
        }
        let _ = write!(
            out,
            "<line x1=\"{LEFT:.1}\" y1=\"{zero:.1}\" x2=\"{:.1}\" y2=\"{zero:.1}\" stroke=\"#333333\"/>",
            WIDTH - RIGHT
        );
        let entries: Vec<(String, &'static str, bool)> = self
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.0.clone(), colour(i), false))
            .collect();
        draw_legend(&mut out, &entries, true);
        out.push_str("</svg>");
        out
    }
}

/// A value for a tooltip: three significant figures.
fn tick_label_value(v: f64) -> String {
    if v == 0.0 {
        "0".to_string()
    } else {
        let digits = (2 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
        format!("{v:.digits$}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_ticks_are_nice_and_cover_the_range() {
        assert_eq!(
            linear_ticks(0.0, 10.0, 5),
            vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        );
        let t = linear_ticks(0.13, 0.87, 4);
        assert_eq!(t, vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        let t = linear_ticks(3.0, 3.0, 5);
        assert!(
            t[0] <= 3.0 && *t.last().unwrap() >= 3.0 && t.len() >= 2,
            "{t:?}"
        );
        assert!(linear_ticks(f64::NAN, 1.0, 5).is_empty());
    }

    #[test]
    fn log_ticks_are_powers_of_ten_with_fine_steps_in_narrow_ranges() {
        assert_eq!(
            log_ticks(40.0, 1_048_576.0),
            vec![10.0, 100.0, 1e3, 1e4, 1e5, 1e6, 1e7]
        );
        assert_eq!(
            log_ticks(3.0, 40.0),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        );
        assert!(log_ticks(0.0, 10.0).is_empty());
        assert!(log_ticks(-1.0, 10.0).is_empty());
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(tick_label(0.0), "0");
        assert_eq!(tick_label(1_000_000.0), "1M");
        assert_eq!(tick_label(65536.0), "65536");
        assert_eq!(tick_label(20_000.0), "20k");
        assert_eq!(tick_label(0.25), "0.25");
        assert_eq!(tick_label(1500.0), "1500");
    }

    #[test]
    fn mapping_is_linear_or_logarithmic() {
        let m = Mapping::new(Scale::Linear, 0.0, 10.0, 100.0, 200.0);
        assert_eq!(m.map(5.0), 150.0);
        let m = Mapping::new(Scale::Log10, 10.0, 1000.0, 0.0, 100.0);
        assert!((m.map(100.0) - 50.0).abs() < 1e-9);
    }

    #[test]
    fn empty_data_gives_a_placeholder_not_a_panic() {
        let p = LinePlot {
            title: "Empty".into(),
            x: Axis::log("size (bytes)"),
            y: Axis::linear("time (µs)"),
            series: vec![Series::new("a", vec![(0.0, 1.0), (f64::NAN, 2.0)])],
            y_from_zero: true,
        };
        let svg = p.to_svg();
        assert!(svg.contains("no data"), "{svg}");
        let b = BarChart {
            title: "Empty bars".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            groups: vec![],
            series: vec![],
            stacked: true,
        };
        assert!(b.to_svg().contains("no data"));
        assert!(stacked_bars("none", "x", "y", &[])
            .to_svg()
            .contains("no data"));
    }

    #[test]
    fn a_line_plot_has_axes_labels_legend_and_one_path_per_series() {
        let p = LinePlot {
            title: "T <&>".into(),
            x: Axis::log("size (bytes)"),
            y: Axis::linear("time (µs)"),
            series: vec![
                Series::new("ours", vec![(1.0, 1.0), (100.0, 3.0), (10000.0, 9.0)]),
                Series::new("memcpy", vec![(1.0, 2.0), (10000.0, 4.0)]).dashed(),
            ],
            y_from_zero: true,
        };
        let svg = p.to_svg();
        assert!(svg.contains("T &lt;&amp;&gt;"));
        assert!(svg.contains(">size (bytes)</text>"));
        assert!(svg.contains(">time (µs)</text>"));
        assert_eq!(svg.matches("<path ").count(), 2);
        assert!(svg.contains("stroke-dasharray"));
        assert!(svg.contains(">memcpy</text>"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    }

    #[test]
    fn stacked_bars_take_every_category_of_every_row() {
        let rows = vec![
            LabelledRow {
                label: "1500".into(),
                parts: [("TCP/IP".to_string(), 12.0), ("copy".to_string(), 20.0)].into(),
            },
            LabelledRow {
                label: "9000".into(),
                parts: [("interrupts".to_string(), 5.0)].into(),
            },
        ];
        let chart = stacked_bars("CPU", "MTU (bytes)", "receiver CPU (%)", &rows);
        assert_eq!(chart.series.len(), 3);
        let interrupts = chart.series.iter().find(|s| s.0 == "interrupts").unwrap();
        assert_eq!(interrupts.1, vec![0.0, 5.0]);
        let svg = chart.to_svg();
        assert_eq!(svg.matches("class=\"bar\"").count(), 6);
        assert!(svg.contains(">receiver CPU (%)</text>"));
    }
}
