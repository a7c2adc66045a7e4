//! What the benchmarks share: settings from the environment, scenario selection and the
//! figures of the report. `engine_throughput` and `runtime_throughput` include it as a
//! module; `binder-rabbit`'s `rabbit_throughput` includes the same file by path.

/// A non-negative integer from the environment (`_` separators allowed), or `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a non-negative integer, got {v:?}")),
        Err(_) => default,
    }
}

/// Which of `count` scenarios `BENCH_SCENARIOS` selects, by number from 1 (all by default).
pub fn selected_scenarios(count: usize) -> Vec<bool> {
    let Ok(v) = std::env::var("BENCH_SCENARIOS") else {
        return vec![true; count];
    };
    let mut on = vec![false; count];
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let i: usize = part
            .parse()
            .ok()
            .filter(|i| (1..=count).contains(i))
            .unwrap_or_else(|| {
                panic!("BENCH_SCENARIOS takes numbers 1 to {count} separated by commas, got {v:?}")
            });
        on[i - 1] = true;
    }
    on
}

/// The median of an unsorted sample (sorts it).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// A rate in messages per second, short: `3.52M`, `412k`, `31.4k`.
pub fn fmt_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2}M", r / 1e6)
    } else if r >= 1e5 {
        format!("{:.0}k", r / 1e3)
    } else {
        format!("{:.1}k", r / 1e3)
    }
}

/// (median, min, max) of each scenario's rates; `None` for a scenario that did not run.
pub type RateStats = Option<(f64, f64, f64)>;

/// Runs a warm-up round, then `rounds` measured rounds, of the `selected` scenarios,
/// rotating which goes first so that none always runs on a cold or a warm machine. Each
/// round prints one line, `label=rate (ms)` per run. `run(i)` runs scenario `i` and returns
/// its result with its rate (msgs/s) and duration. Returns the measured results of each
/// scenario (the warm-up's are dropped).
pub fn run_rounds<R>(
    selected: &[bool],
    rounds: usize,
    label: impl Fn(usize) -> String,
    mut run: impl FnMut(usize) -> (R, f64, std::time::Duration),
) -> Vec<Vec<R>> {
    let count = selected.len();
    let mut results: Vec<Vec<R>> = (0..count).map(|_| Vec::new()).collect();
    for round in 0..=rounds {
        let mut line = String::new();
        for k in 0..count {
            let idx = (round + k) % count;
            if !selected[idx] {
                continue;
            }
            let (result, rate, elapsed) = run(idx);
            line.push_str(&format!(
                "  {}={} ({:.0} ms)",
                label(idx),
                fmt_rate(rate),
                elapsed.as_secs_f64() * 1e3
            ));
            if round > 0 {
                results[idx].push(result);
            }
        }
        let name = if round == 0 {
            "warm-up".to_owned()
        } else {
            format!("round {round}")
        };
        println!("{name:>8}:{line}");
    }
    results
}

/// The median, min and max rate of each scenario's results.
pub fn rate_stats<R>(results: &[Vec<R>], rate: impl Fn(&R) -> f64) -> Vec<RateStats> {
    results
        .iter()
        .map(|rs| {
            let mut rates: Vec<f64> = rs.iter().map(&rate).collect();
            (!rates.is_empty()).then(|| {
                let med = median(&mut rates);
                (med, rates[0], rates[rates.len() - 1])
            })
        })
        .collect()
}
