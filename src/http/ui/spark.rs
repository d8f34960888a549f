//! The dashboard's item sparkline (SPEC §7): the last counts as a polyline,
//! and for a check with `items_below_usual` the usual band behind it.

use minijinja::context;

/// The sparkline's polyline points, oldest first; none below two points.
pub(super) fn spark(items: &[i64]) -> Option<String> {
    spark_up_to(items, 0.0)
}

/// The sparkline, scaled to show `ceiling` too (the usual count).
pub(super) fn spark_up_to(items: &[i64], ceiling: f64) -> Option<String> {
    if items.len() < 2 {
        return None;
    }
    let max = spark_max(items, ceiling);
    let step = 100.0 / (items.len() - 1) as f64;
    Some(
        items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                format!(
                    "{:.1},{:.1}",
                    i as f64 * step,
                    22.0 - 20.0 * *v as f64 / max
                )
            })
            .collect::<Vec<_>>()
            .join(" "),
    )
}

fn spark_max(items: &[i64], ceiling: f64) -> f64 {
    (items.iter().copied().max().unwrap_or(0).max(1) as f64).max(ceiling)
}

/// The usual band on the check's sparkline (`items_below_usual`): from the
/// usual count down to the fraction of it below which a count is low, as
/// `y` and `height` in the sparkline's scale.
pub(super) fn usual_band(
    items: &[i64],
    usual: Option<f64>,
    fraction: Option<f64>,
) -> Option<(f64, f64)> {
    let (usual, fraction) = (usual?, fraction?);
    if items.len() < 2 {
        return None;
    }
    let y = |v: f64| 22.0 - 20.0 * v / spark_max(items, usual);
    Some((y(usual), y(fraction * usual) - y(usual)))
}

/// The usual band's place on the sparkline and its tooltip's numbers.
pub(super) fn band_context(
    y: f64,
    height: f64,
    v: &crate::http::api::CheckView,
) -> minijinja::Value {
    let usual = v.usual_items.unwrap_or(0.0);
    let low = usual * v.items_below_usual.unwrap_or(0.0);
    context! { y => format!("{y:.1}"), height => format!("{height:.1}"),
    usual => count_text(usual), low => count_text(low) }
}

/// An item count that may be a mean: one decimal, none when whole.
pub(super) fn count_text(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0")
        .map_or_else(|| s.clone(), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usual_band_shares_the_sparklines_scale() {
        // Usual 40 above every count: the scale goes up to it.
        assert_eq!(spark_up_to(&[0, 20], 40.0).unwrap(), "0.0,22.0 100.0,12.0");
        let (y, h) = usual_band(&[0, 20], Some(40.0), Some(0.25)).unwrap();
        assert_eq!((y, h), (2.0, 15.0), "from 40 down to 10");
        assert_eq!(usual_band(&[0, 20], None, Some(0.25)), None);
        assert_eq!(usual_band(&[5], Some(40.0), Some(0.25)), None);
    }

    #[test]
    fn sparkline_needs_two_points() {
        assert_eq!(spark(&[3]), None);
        assert_eq!(spark(&[0, 4]).unwrap(), "0.0,22.0 100.0,2.0");
    }
}
