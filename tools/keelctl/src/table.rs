//! `get`'s tables, aligned as kubectl aligns them; the columns themselves are
//! [`keel_print::table`]'s, which the API server's `as=Table` answers share.

pub use keel_api::selector::label_selector;
pub use keel_print::table::Columns;

use crate::resources::Resource;

/// The columns of `resource` for `get` (`-o wide`, `-A`, several kinds at once).
pub fn columns(resource: &Resource, wide: bool, all_namespaces: bool, show_kind: bool) -> Columns {
    Columns::new(
        &resource.gvr.group,
        &resource.kind,
        &resource.printer_columns,
        wide,
        all_namespaces && resource.namespaced,
        show_kind.then(|| resource.kind_name()),
    )
}

/// Aligns rows as kubectl's tabwriter does (minimum width 6, padding 3, the last column
/// unpadded), remembering widths across calls so that `get -w` rows line up with the header.
#[derive(Default)]
pub struct Aligner {
    widths: Vec<usize>,
}

const MIN_WIDTH: usize = 6;
const PADDING: usize = 3;

impl Aligner {
    /// The lines of `rows`, widening columns to fit them.
    pub fn lines(&mut self, rows: &[Vec<String>]) -> Vec<String> {
        for row in rows {
            let cells = row.len().saturating_sub(1);
            if self.widths.len() < cells {
                self.widths.resize(cells, MIN_WIDTH);
            }
            for (i, cell) in row.iter().take(cells).enumerate() {
                self.widths[i] = self.widths[i].max(cell.chars().count() + PADDING);
            }
        }
        rows.iter()
            .map(|row| {
                let mut line = String::new();
                for (i, cell) in row.iter().enumerate() {
                    line.push_str(cell);
                    if i + 1 < row.len() {
                        let pad = self.widths[i].saturating_sub(cell.chars().count());
                        line.extend(std::iter::repeat_n(' ', pad));
                    }
                }
                line
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_like_kubectl() {
        let mut a = Aligner::default();
        let lines = a.lines(&[
            vec!["NAME".into(), "READY".into(), "AGE".into()],
            vec!["nginx-deployment".into(), "2/2".into(), "5s".into()],
        ]);
        assert_eq!(
            lines,
            [
                "NAME               READY   AGE",
                "nginx-deployment   2/2     5s"
            ]
        );
        // A later, longer row widens its column; earlier widths are kept.
        let more = a.lines(&[vec!["x".into(), "10/10".into(), "1s".into()]]);
        assert_eq!(more, ["x                  10/10   1s"]);
    }
}
