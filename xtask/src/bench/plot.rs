//! The bench plot: TFLOP/s against sequence length, one line per flashcore generation and peer,
//! one panel per (dtype, causal, head_dim), all in one SVG (plotters' SVG backend: no fonts or
//! bitmaps needed, so it renders the same on any machine).

use anyhow::{anyhow, Result};
use flashcore::DType;
use plotters::prelude::*;

use super::report::{Report, Source};

/// One panel: a (dtype, causal, head_dim) group.
#[derive(Clone, Debug, PartialEq)]
pub struct Panel {
    pub dtype: DType,
    pub causal: bool,
    pub head_dim: usize,
    pub lines: Vec<Line>,
}

/// One implementation's points in a panel: (seq, TFLOP/s), sorted by seq.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub name: String,
    pub source: Source,
    pub points: Vec<(f64, f64)>,
}

/// Groups the timed rows into panels. Where several shapes of a panel share a sequence length
/// (different B·H), the one with the most work (largest B·H) is plotted, so each line has one
/// point per sequence length.
pub fn panels(report: &Report) -> Vec<Panel> {
    let mut keys: Vec<(DType, bool, usize)> = Vec::new();
    for r in &report.rows {
        let k = (r.shape.dtype, r.shape.causal, r.shape.head_dim);
        if r.timing().is_some() && !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.sort_by_key(|&(d, c, h)| (d == DType::Bf16, c, h));
    let mut out = Vec::new();
    for (dtype, causal, head_dim) in keys {
        let mut lines: Vec<Line> = Vec::new();
        // (implementation, seq) -> (B·H, TFLOP/s)
        let mut best: Vec<(String, Source, usize, usize, f64)> = Vec::new();
        for r in &report.rows {
            let s = &r.shape;
            if (s.dtype, s.causal, s.head_dim) != (dtype, causal, head_dim) {
                continue;
            }
            let Some(t) = r.timing() else { continue };
            if r.source == Source::Floor {
                continue; // a time, not a rate
            }
            let bh = s.batch * s.heads;
            match best
                .iter_mut()
                .find(|(n, _, seq, ..)| *n == r.implementation && *seq == s.seq)
            {
                Some(e) if e.3 >= bh => {}
                Some(e) => {
                    e.3 = bh;
                    e.4 = t.tflops;
                }
                None => best.push((r.implementation.clone(), r.source, s.seq, bh, t.tflops)),
            }
        }
        for (name, source, seq, _, tf) in best {
            match lines.iter_mut().find(|l| l.name == name) {
                Some(l) => l.points.push((seq as f64, tf)),
                None => lines.push(Line {
                    name,
                    source,
                    points: vec![(seq as f64, tf)],
                }),
            }
        }
        for l in &mut lines {
            l.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        // flashcore first, then peers, in table order.
        lines.sort_by_key(|l| l.source != Source::Flashcore);
        out.push(Panel {
            dtype,
            causal,
            head_dim,
            lines,
        });
    }
    out
}

const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The whole figure as SVG text. Colours are fixed per implementation name across panels;
/// flashcore lines are solid with filled dots, peers dashed with hollow ones.
pub fn render_svg(report: &Report) -> Result<String> {
    let panels = panels(report);
    let mut names: Vec<String> = Vec::new();
    for p in &panels {
        for l in &p.lines {
            if !names.contains(&l.name) && l.source == Source::Flashcore {
                names.push(l.name.clone());
            }
        }
    }
    for p in &panels {
        for l in &p.lines {
            if !names.contains(&l.name) {
                names.push(l.name.clone());
            }
        }
    }
    let color = |n: &str| {
        let i = names.iter().position(|x| x == n).unwrap_or(0);
        PALETTE[i % PALETTE.len()]
    };
    let cols = panels.len().clamp(1, 2);
    let rows = panels.len().div_ceil(cols).max(1);
    let (w, h) = (640 * cols as u32, 40 + 420 * rows as u32);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let title = format!(
            "flashcore bench-all on {}: TFLOP/s vs sequence length",
            report.device.name
        );
        let body = root.titled(&title, ("sans-serif", 22)).map_err(plot_err)?;
        if panels.is_empty() {
            body.draw(&Text::new(
                "no timed rows",
                (20, 20),
                ("sans-serif", 18).into_font(),
            ))
            .map_err(plot_err)?;
        }
        let areas = body.split_evenly((rows, cols));
        for (area, p) in areas.iter().zip(&panels) {
            let xs: Vec<f64> = p
                .lines
                .iter()
                .flat_map(|l| l.points.iter().map(|q| q.0))
                .collect();
            let ys: Vec<f64> = p
                .lines
                .iter()
                .flat_map(|l| l.points.iter().map(|q| q.1))
                .collect();
            // x is log2(seq): one tick per power of two, labelled with the length.
            let (xmin, xmax) = xs.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| {
                (a.min(x.log2()), b.max(x.log2()))
            });
            // Headroom for the legend in the upper left, which grows with the number of lines.
            let ymax =
                ys.iter().copied().fold(1.0f64, f64::max) * (1.15 + 0.07 * p.lines.len() as f64);
            let (x0, x1) = (xmin.floor() - 0.5, xmax.ceil() + 0.5);
            let caption = format!(
                "{} {} D={}",
                p.dtype,
                if p.causal { "causal" } else { "non-causal" },
                p.head_dim
            );
            let mut chart = ChartBuilder::on(area)
                .caption(caption, ("sans-serif", 16))
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(52)
                .build_cartesian_2d(x0..x1, 0f64..ymax)
                .map_err(plot_err)?;
            chart
                .configure_mesh()
                .x_desc("sequence length (seq_q = seq_k, log scale)")
                .y_desc("TFLOP/s")
                .x_labels((x1 - x0).round() as usize + 1)
                .x_label_formatter(&|x| {
                    if (x - x.round()).abs() < 1e-6 {
                        format!("{}", 2f64.powf(x.round()) as u64)
                    } else {
                        String::new()
                    }
                })
                .y_label_formatter(&|y| format!("{y:.0}"))
                .light_line_style(WHITE)
                .draw()
                .map_err(plot_err)?;
            for Line {
                name,
                source,
                points,
            } in &p.lines
            {
                let pts: Vec<(f64, f64)> = points.iter().map(|&(x, y)| (x.log2(), y)).collect();
                let c = color(name);
                let style = c.stroke_width(2);
                let ours = *source == Source::Flashcore;
                if ours {
                    chart
                        .draw_series(LineSeries::new(pts.clone(), style))
                        .map_err(plot_err)?
                        .label(name.as_str())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
                    chart
                        .draw_series(pts.iter().map(|&q| Circle::new(q, 4, c.filled())))
                        .map_err(plot_err)?;
                } else {
                    chart
                        .draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style))
                        .map_err(plot_err)?
                        .label(name.as_str())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
                    chart
                        .draw_series(pts.iter().map(|&q| Circle::new(q, 4, c.stroke_width(2))))
                        .map_err(plot_err)?;
                }
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.4))
                .label_font(("sans-serif", 12))
                .draw()
                .map_err(plot_err)?;
        }
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing the plot: {e:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::tests::fixture;

    #[test]
    fn panels_group_by_dtype_causal_and_head_dim() {
        let p = panels(&fixture());
        assert_eq!(p.len(), 2);
        assert_eq!(
            (p[0].dtype, p[0].causal, p[0].head_dim),
            (DType::F16, false, 64)
        );
        let names: Vec<&str> = p[0].lines.iter().map(|l| l.name.as_str()).collect();
        // Untimed rows (WRONG, errors) draw nothing; flashcore lines come first.
        assert_eq!(
            names,
            ["persistent-hopper", "scalar", "sdpa_flash", "sdpa_cudnn"]
        );
        assert_eq!(p[1].lines.len(), 3);
    }

    #[test]
    fn one_point_per_seq_keeps_the_largest_batch_times_heads() {
        let mut r = fixture();
        let mut extra = r.rows[0].clone();
        extra.shape.batch = 4;
        extra.shape.heads = 16;
        if let crate::bench::report::Outcome::Timed(t) = &mut extra.outcome {
            t.tflops = 123.0;
        }
        r.rows.push(extra);
        let p = panels(&r);
        assert_eq!(p[0].lines[0].points, vec![(512.0, 123.0)]);
    }

    #[test]
    fn the_svg_names_every_line() {
        let svg = render_svg(&fixture()).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        for n in [
            "persistent-hopper",
            "sdpa_cudnn",
            "fa3-jax (anchor)",
            "f16 causal D=128",
        ] {
            assert!(svg.contains(n), "{n} missing");
        }
        let mut empty = fixture();
        empty.rows.clear();
        assert!(render_svg(&empty).unwrap().contains("no timed rows"));
    }
}
