//! Rounds and ratios: every contender of a scenario runs once per round, the order rotating
//! from round to round; a ratio is taken between two contenders of the same round, and a
//! scenario reports the median and the range of those per-round ratios.

use crate::support::median;

/// What one run of a contender measured: the figure ratios are taken of, and how to print it.
#[derive(Debug, Clone, Copy)]
pub struct Figure {
    pub value: f64,
    pub unit: Unit,
}

/// The kind of a [`Figure`], which says whether higher is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Messages per second (higher is better).
    Rate,
    /// Microseconds (lower is better).
    Micros,
    /// Bytes (lower is better).
    Bytes,
    /// Milliseconds (lower is better).
    Millis,
}

impl Figure {
    pub fn rate(v: f64) -> Figure {
        Figure {
            value: v,
            unit: Unit::Rate,
        }
    }

    pub fn bytes(v: f64) -> Figure {
        Figure {
            value: v,
            unit: Unit::Bytes,
        }
    }

    pub fn millis(d: std::time::Duration) -> Figure {
        Figure {
            value: d.as_secs_f64() * 1e3,
            unit: Unit::Millis,
        }
    }
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.unit {
            Unit::Rate => write!(f, "{}/s", crate::support::fmt_rate(self.value)),
            Unit::Micros => write!(f, "{:.1} µs", self.value),
            Unit::Bytes => write!(f, "{:.0} B", self.value),
            Unit::Millis => write!(f, "{:.1} ms", self.value),
        }
    }
}

/// Runs a warm-up round and then `rounds` measured rounds of `contenders`, rotating which goes
/// first, printing a line per round. `run(i)` runs contender `i` and returns its figures (one
/// or more, the same count every time: a latency run gives p50 and p99). Returns, per
/// contender, per measured round, the figures.
pub fn run_rounds(
    contenders: &[&str],
    rounds: usize,
    run: impl FnMut(usize) -> Vec<Figure>,
) -> Vec<Vec<Vec<Figure>>> {
    run_rounds_with(contenders, &[], rounds, run)
}

/// [`run_rounds`], where the contenders named in `on_demand` run only when `BENCH_ONLY`
/// names them (diagnostic contenders, kept out of the full run).
pub fn run_rounds_with(
    contenders: &[&str],
    on_demand: &[&str],
    rounds: usize,
    mut run: impl FnMut(usize) -> Vec<Figure>,
) -> Vec<Vec<Vec<Figure>>> {
    let count = contenders.len();
    // For profiling or comparing a few contenders (names separated by `|`): the others do
    // not run (and have no figures, nor ratios).
    let only = std::env::var("BENCH_ONLY").ok().filter(|o| !o.is_empty());
    let only: Option<Vec<&str>> = only.as_deref().map(|o| o.split('|').collect());
    let runs = |name: &str| match &only {
        Some(names) => names.contains(&name),
        None => !on_demand.contains(&name),
    };
    let mut results: Vec<Vec<Vec<Figure>>> = vec![Vec::new(); count];
    for round in 0..=rounds {
        let mut line = String::new();
        for k in 0..count {
            let i = (round + k) % count;
            if !runs(contenders[i]) {
                continue;
            }
            let figures = run(i);
            let shown: Vec<String> = figures.iter().map(ToString::to_string).collect();
            line.push_str(&format!("  {}={}", contenders[i], shown.join("/")));
            if round > 0 {
                results[i].push(figures);
            }
        }
        let name = if round == 0 {
            "warm-up".to_owned()
        } else {
            format!("round {round}")
        };
        println!("  {name:>8}:{line}");
    }
    results
}

/// Median, min and max of a sample.
#[derive(Debug, Clone, Copy)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(mut values: Vec<f64>) -> Spread {
        let med = median(&mut values);
        Spread {
            median: med,
            min: values[0],
            max: values[values.len() - 1],
        }
    }
}

/// Per-round ratios of figure `k` of contender `a` to that of contender `b` (ours / peer).
pub fn ratio(results: &[Vec<Vec<Figure>>], a: usize, b: usize, k: usize) -> Spread {
    Spread::of(
        results[a]
            .iter()
            .zip(&results[b])
            .map(|(x, y)| x[k].value / y[k].value)
            .collect(),
    )
}

/// The spread of figure `k` of contender `i` over the rounds.
pub fn spread(results: &[Vec<Vec<Figure>>], i: usize, k: usize) -> Spread {
    Spread::of(results[i].iter().map(|f| f[k].value).collect())
}

/// Prints one scenario's report: each contender's figures (median, min–max), then each
/// requested ratio `(ours, peer, figure index, what)`.
pub fn report(
    contenders: &[&str],
    figure_names: &[&str],
    results: &[Vec<Vec<Figure>>],
    ratios: &[(usize, usize, usize)],
) {
    for (i, name) in contenders.iter().enumerate() {
        let Some(first) = results[i].first() else {
            continue;
        };
        let parts: Vec<String> = (0..first.len())
            .map(|k| {
                let s = spread(results, i, k);
                let f = |v| Figure {
                    value: v,
                    unit: first[k].unit,
                };
                format!(
                    "{} {} ({}–{})",
                    figure_names[k],
                    f(s.median),
                    f(s.min),
                    f(s.max)
                )
            })
            .collect();
        println!("    {name:<34} {}", parts.join(", "));
    }
    for &(a, b, k) in ratios {
        if results[a].is_empty() || results[b].is_empty() {
            continue;
        }
        let r = ratio(results, a, b, k);
        let better = match results[a][0][k].unit {
            Unit::Rate => "higher is better",
            _ => "lower is better",
        };
        println!(
            "    ratio {} / {}{}: {:.2} ({:.2}–{:.2}), {better}",
            contenders[a],
            contenders[b],
            if figure_names[k].is_empty() {
                String::new()
            } else {
                format!(", {}", figure_names[k])
            },
            r.median,
            r.min,
            r.max,
        );
    }
}
