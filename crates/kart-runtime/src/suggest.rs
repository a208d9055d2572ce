//! "Did you mean": the known name closest to a misspelt one, for error hints.

/// The candidate closest to `name` by edit distance (a swap of two neighbouring
/// letters counts as one edit, case is ignored), if it is close enough to be a typo:
/// at most one edit per three letters, at least one (for names of two letters or more). `None` when nothing is that close
/// or `name` is itself a candidate.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = name.to_lowercase();
    let letters = name.chars().count();
    // One letter is too short to call anything a typo of it.
    let allowed = if letters < 2 { 0 } else { (letters / 3).max(1) };
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        if candidate == name {
            return None;
        }
        let distance = strsim::damerau_levenshtein(&lower, &candidate.to_lowercase());
        if distance <= allowed && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// `did you mean `NAME`?` for [`closest`], or nothing.
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    closest(name, candidates).map(|c| format!("did you mean `{c}`?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_name() {
        let fields = ["name", "sources", "entry", "params", "include"];
        assert_eq!(closest("sorces", fields), Some("sources"));
        assert_eq!(closest("soruces", fields), Some("sources"));
        assert_eq!(closest("Entry", fields), Some("entry"));
        assert_eq!(closest("tiles", ["tile", "scale"]), Some("tile"));
        assert_eq!(closest("scal", ["tile", "scale"]), Some("scale"));
    }

    #[test]
    fn unrelated_names_find_nothing() {
        assert_eq!(closest("grid", ["name", "sources"]), None);
        assert_eq!(closest("x", ["y", "z"]), None);
        assert_eq!(closest("x", ["X"]), Some("X"));
        assert_eq!(closest("BM", ["BN", "BK"]), Some("BN"));
        assert_eq!(closest("scale", ["scale", "scal"]), None);
        assert_eq!(closest("anything", std::iter::empty()), None);
    }
}
