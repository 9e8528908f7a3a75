use super::*;

fn row(name: &str) -> Aggregate {
    let d = Duration::from_micros(1);
    let (count, ran) = (1, 1);
    Aggregate { name: name.into(), count, ran, total: d, min: d, mean: d, max: d, mean_queue_wait: d }
}

#[test]
fn long_and_wide_names_keep_the_table_aligned() {
    let long = "x".repeat(70_000);
    let text = table(&[row(&long), row("é✓"), row("ab")]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let widths: Vec<usize> = lines.iter().map(|l| l.chars().count()).collect();
    assert!(widths.iter().all(|w| *w == widths[0]), "{widths:?}");
    assert!(lines[1].starts_with(&format!("{}…", "x".repeat(NAME_WIDTH - 1))), "{}", lines[1]);
}
