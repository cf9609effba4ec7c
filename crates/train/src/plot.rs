//! Training curves as a PNG (`hat train plot`): loss (train, and validation where measured),
//! learning rate and gradient norm of one or more runs, three panels side by side, one colour
//! per run. The font is embedded (DejaVu Sans), so a plot needs nothing from the system.

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;

use crate::error::{io, Result, TrainError};
use crate::sft::StepMetrics;

/// One run's curves, read from its `metrics.jsonl`.
#[derive(Debug, Clone)]
pub struct Run {
    /// Legend name: the run folder's name.
    pub name: String,
    pub steps: Vec<StepMetrics>,
}

/// Reads `DIR/metrics.jsonl` (or a metrics file given directly).
pub fn read_run(path: &Path) -> Result<Run> {
    let file = if path.is_dir() {
        path.join("metrics.jsonl")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&file).map_err(io(file.display()))?;
    let mut steps = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let m: StepMetrics = serde_json::from_str(line).map_err(|e| TrainError::Data {
            file: file.display().to_string(),
            line: i + 1,
            message: format!("not a metrics line: {e}"),
        })?;
        steps.push(m);
    }
    if steps.is_empty() {
        return Err(TrainError::Invalid(format!(
            "{} has no steps yet: nothing to plot",
            file.display()
        )));
    }
    let folder = if path.is_dir() {
        path
    } else {
        path.parent().unwrap_or(path)
    };
    let name = folder
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| folder.display().to_string());
    Ok(Run { name, steps })
}

/// Draws `runs` into a PNG of `width` x `height` pixels at `out`.
pub fn plot(runs: &[Run], out: &Path, width: u32, height: u32) -> Result<()> {
    if runs.is_empty() {
        return Err(TrainError::Invalid("no runs to plot".into()));
    }
    if !(300..=8000).contains(&width) || !(200..=8000).contains(&height) {
        return Err(TrainError::Invalid(format!(
            "a plot of {width}x{height} pixels: use 300..=8000 wide and 200..=8000 high"
        )));
    }
    // The bitmap backend picks its encoder by extension and reported a wrong one as a raw
    // `ImageError(Unsupported...)`.
    if out.is_dir()
        || !out
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("png"))
    {
        return Err(TrainError::Invalid(format!(
            "--out {}: the plot is written as a PNG file; give a path ending in .png",
            out.display()
        )));
    }
    register_font()?;
    let names = legend_names(runs);
    let root = BitMapBackend::new(out, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let series = |f: fn(&StepMetrics) -> Option<f64>| -> Vec<Vec<(f64, f64)>> {
        runs.iter()
            .map(|r| {
                r.steps
                    .iter()
                    .filter_map(|m| f(m).filter(|v| v.is_finite()).map(|v| (m.step as f64, v)))
                    .collect()
            })
            .collect()
    };
    let reward = series(|m| m.extra.get("reward_mean").copied());
    let with_reward = reward.iter().any(|r| !r.is_empty());
    let panels = root.split_evenly((1, if with_reward { 4 } else { 3 }));
    let max_step = runs
        .iter()
        .flat_map(|r| r.steps.iter().map(|m| m.step))
        .max()
        .unwrap_or(1)
        .max(1);

    let train = series(|m| Some(m.loss));
    let val = series(|m| m.val_loss);
    let lr = series(|m| Some(m.lr));
    let norm = series(|m| Some(m.grad_norm));

    let loss_range = y_range(train.iter().chain(val.iter()));
    let mut chart = new_chart(
        &panels[0],
        "loss (lines: train, dots: validation)",
        max_step,
        loss_range,
    )?;
    for (i, (t, v)) in train.iter().zip(&val).enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(t.iter().copied(), color.stroke_width(2)))
            .map_err(draw_err)?
            .label(names[i].as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
        chart
            .draw_series(v.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(draw_err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(draw_err)?;

    let mut others = vec![
        (&panels[1], "learning rate", &lr),
        (&panels[2], "gradient norm (before clipping)", &norm),
    ];
    if with_reward {
        others.push((&panels[3], "RL reward (mean over rollouts)", &reward));
    }
    for (area, caption, data) in others {
        let mut chart = new_chart(area, caption, max_step, y_range(data.iter()))?;
        for (i, s) in data.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(s.iter().copied(), color.stroke_width(2)))
                .map_err(draw_err)?;
        }
    }
    root.present().map_err(|e| {
        TrainError::Invalid(format!("cannot write the plot {}: {e}", out.display()))
    })?;
    Ok(())
}

type Chart<'a, 'b> = ChartContext<
    'a,
    BitMapBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

fn new_chart<'a, 'b>(
    area: &'a DrawingArea<BitMapBackend<'b>, plotters::coord::Shift>,
    caption: &str,
    max_step: usize,
    (lo, hi): (f64, f64),
) -> Result<Chart<'a, 'b>> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..max_step as f64, lo..hi)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc("optimiser step")
        // whole steps only: a short run would repeat rounded labels
        .x_labels((max_step + 1).min(11))
        .y_label_formatter(&|v| format_tick(*v))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(BLACK.mix(0.05))
        .draw()
        .map_err(draw_err)?;
    Ok(chart)
}

/// The y range of some series with 5% padding; a flat or empty series gets a visible band.
fn y_range<'a>(series: impl Iterator<Item = &'a Vec<(f64, f64)>>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    // Values past 1e300 (a diverged run) would overflow the padded range and stall the tick
    // loop; they are left out of the axis (the curve runs off the chart instead).
    for &(_, y) in series.flatten().filter(|(_, y)| y.abs() <= 1e300) {
        lo = lo.min(y);
        hi = hi.max(y);
    }
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    let pad = if hi > lo {
        (hi - lo) * 0.05
    } else {
        (hi.abs() * 0.1).max(1e-6)
    };
    (
        (lo - pad).max(if lo >= 0.0 { 0.0 } else { f64::MIN }),
        hi + pad,
    )
}

fn format_tick(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e4).contains(&a) {
        format!("{v:.1e}")
    } else {
        let digits = if a < 1.0 { 4 } else { 2 };
        format!("{v:.digits$}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .into()
    }
}

/// Folder names, made unique with a suffix where two runs share one.
fn legend_names(runs: &[Run]) -> Vec<String> {
    runs.iter()
        .enumerate()
        .map(|(i, r)| {
            let same = runs[..i].iter().filter(|o| o.name == r.name).count();
            if same == 0 {
                r.name.clone()
            } else {
                format!("{} ({})", r.name, same + 1)
            }
        })
        .collect()
}

fn register_font() -> Result<()> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(TrainError::Invalid(
            "the embedded plot font did not load".into(),
        ))
    }
}

fn draw_err(e: impl std::fmt::Display) -> TrainError {
    TrainError::Invalid(format!("drawing the plot: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(step: usize, loss: f64, val: Option<f64>) -> StepMetrics {
        StepMetrics {
            step,
            loss,
            lr: 1e-4 * step as f64,
            grad_norm: 1.0 / step as f64,
            tokens: 100,
            loss_tokens: 10,
            tokens_per_s: 50.0,
            seconds: step as f64,
            wall_seconds: 1.2 * step as f64,
            epoch: 0,
            val_loss: val,
            extra: Default::default(),
        }
    }

    #[test]
    fn plots_two_runs_to_a_png_with_their_colours() {
        let dir = tempfile::tempdir().unwrap();
        let runs = vec![
            Run {
                name: "a".into(),
                steps: (1..=10)
                    .map(|s| metrics(s, 3.0 / s as f64, (s % 5 == 0).then_some(1.0)))
                    .collect(),
            },
            Run {
                name: "a".into(),
                steps: (1..=6).map(|s| metrics(s, 2.0, None)).collect(),
            },
        ];
        assert_eq!(legend_names(&runs), ["a", "a (2)"]);
        let out = dir.path().join("curves.png");
        plot(&runs, &out, 900, 300).unwrap();
        let img = image::open(&out).unwrap().to_rgb8();
        assert_eq!(img.dimensions(), (900, 300));
        let has = |(r, g, b): (u8, u8, u8)| img.pixels().any(|p| p.0 == [r, g, b]);
        // each run's line in its own colour, and the black axes
        assert!(has(Palette99::pick(0).to_rgba().rgb()));
        assert!(has(Palette99::pick(1).to_rgba().rgb()));
        assert!(has(BLACK.rgb()));
    }

    #[test]
    fn a_bad_metrics_line_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let good = serde_json::to_string(&metrics(1, 1.0, None)).unwrap();
        std::fs::write(
            dir.path().join("metrics.jsonl"),
            format!("{good}\n{{oops\n"),
        )
        .unwrap();
        let e = read_run(dir.path()).unwrap_err().to_string();
        assert!(e.contains("metrics.jsonl:2:"), "{e}");
    }

    #[test]
    fn an_empty_run_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("metrics.jsonl"), "").unwrap();
        let e = read_run(dir.path()).unwrap_err().to_string();
        assert!(e.contains("no steps yet"), "{e}");
        let e = read_run(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing"), "{e}");
    }

    #[test]
    fn ranges_pad_and_survive_flat_or_empty_series() {
        assert_eq!(y_range([vec![]].iter()), (0.0, 1.0));
        let (lo, hi) = y_range([vec![(1.0, 2.0)]].iter());
        assert!(lo < 2.0 && hi > 2.0);
        let (lo, hi) = y_range([vec![(1.0, 1.0), (2.0, 3.0)]].iter());
        assert!((lo - 0.9).abs() < 1e-9 && (hi - 3.1).abs() < 1e-9);
        // red-team finding: two losses of 1.7e308 made the range infinite and the plot hang
        let (lo, hi) = y_range([vec![(1.0, 1.7e308), (2.0, -1.7e308), (3.0, 0.5)]].iter());
        assert!(lo.is_finite() && hi.is_finite() && hi > lo, "{lo} {hi}");
    }
}
