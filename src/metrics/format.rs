//! The exposition formats: Prometheus text 0.0.4 unless a scraper asks for
//! OpenMetrics, and the rewrite from one to the other.

/// The exposition format a scraper asked for (its `Accept` header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`: what Prometheus gets unless it asks for
    /// OpenMetrics, and what `promtool check metrics` reads.
    Text,
    OpenMetrics,
}

impl Format {
    /// OpenMetrics only when the `Accept` header names it (Prometheus sends
    /// it first when its scrape protocols allow).
    pub fn negotiate(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// OpenMetrics → Prometheus text 0.0.4. The samples are the same; what
/// differs is that a counter's HELP and TYPE name the family (`x`) in
/// OpenMetrics but the sample (`x_total`) in the text format, that the text
/// format has no `# UNIT` and no `# EOF`.
pub(super) fn text_format(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(line) => out.push_str(&line),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_named_by_their_samples_in_the_text_format() {
        let om = "# HELP a_things Things.\n# TYPE a_things counter\na_things_total 3\n# HELP b Gauge.\n# TYPE b gauge\n# UNIT b seconds\nb 1\n# EOF\n";
        assert_eq!(
            text_format(om),
            "# HELP a_things_total Things.\n# TYPE a_things_total counter\na_things_total 3\n# HELP b Gauge.\n# TYPE b gauge\nb 1\n"
        );
    }

    #[test]
    fn openmetrics_only_when_asked_for() {
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(
            Format::negotiate(Some("text/plain;version=0.0.4;q=0.5,*/*;q=0.1")),
            Format::Text
        );
        let prometheus = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
    }
}
