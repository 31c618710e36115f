//! arXiv identifiers: validation and normalisation.
//!
//! Two schemes exist (<https://info.arxiv.org/help/arxiv_identifier.html>):
//!
//! - **new style** (since April 2007): `YYMM.NNNN` (2007–2014) or `YYMM.NNNNN` (since
//!   2015), e.g. `2101.00001`;
//! - **old style** (until March 2007): `archive[.SUBJECT]/YYMMNNN`, e.g. `hep-th/9901001`
//!   or `math.GT/0309136`.
//!
//! Both may carry a version suffix `vN` (`2101.00001v2`). A leading `arXiv:` and an
//! `https://arxiv.org/abs/` (or `/pdf/`) address around the id are accepted and removed.

/// What to write instead of an id we cannot use; part of every id error.
pub const ID_FORMS: &str = "write a new-style id such as `2101.00001` (optionally with a \
                            version, `2101.00001v2`, or an `arXiv:` prefix) or an old-style \
                            id such as `hep-th/9901001` or `math.GT/0309136`";

/// Normalises `raw` into the id arXiv's API takes (`2101.00001v2`, `hep-th/9901001`), or
/// explains why it is not an arXiv id.
pub fn normalize(raw: &str) -> Result<String, String> {
    let mut id = raw.trim();
    for prefix in [
        "https://arxiv.org/abs/",
        "http://arxiv.org/abs/",
        "https://arxiv.org/pdf/",
        "http://arxiv.org/pdf/",
        "https://export.arxiv.org/abs/",
        "http://export.arxiv.org/abs/",
        "arxiv.org/abs/",
        "arxiv.org/pdf/",
    ] {
        if id.len() >= prefix.len() && id[..prefix.len()].eq_ignore_ascii_case(prefix) {
            id = &id[prefix.len()..];
            if let Some(stripped) = id.strip_suffix(".pdf") {
                id = stripped;
            }
            break;
        }
    }
    if id.len() >= 6 && id[..6].eq_ignore_ascii_case("arxiv:") {
        id = id[6..].trim_start();
    }
    if id.is_empty() {
        return Err(format!("the arXiv id is empty: {ID_FORMS}"));
    }
    if is_new_style(id) || is_old_style(id) {
        Ok(id.to_owned())
    } else {
        Err(format!("`{}` is not an arXiv id: {ID_FORMS}", raw.trim()))
    }
}

/// Splits an optional `vN` (N ≥ 1, digits only) off the end.
fn strip_version(id: &str) -> Option<&str> {
    match id.rfind('v') {
        Some(i) => {
            let digits = &id[i + 1..];
            let ok = !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && !digits.starts_with('0');
            ok.then_some(&id[..i])
        }
        None => Some(id),
    }
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `YYMM` with a month 01–12.
fn is_year_month(s: &str) -> bool {
    all_digits(s) && s.len() == 4 && matches!(s[2..].parse::<u8>(), Ok(1..=12))
}

/// `YYMM.NNNN` or `YYMM.NNNNN`, optionally `vN`.
pub fn is_new_style(id: &str) -> bool {
    let Some(base) = strip_version(id) else {
        return false;
    };
    let Some((yymm, number)) = base.split_once('.') else {
        return false;
    };
    is_year_month(yymm) && all_digits(number) && (number.len() == 4 || number.len() == 5)
}

/// `archive[.SUBJECT]/YYMMNNN`, optionally `vN`. Archives are lower-case letters with
/// inner hyphens (`hep-th`, `cond-mat`, `q-bio`); subject classes are letters with inner
/// hyphens (`GT`, `AI`, `mes-hall`).
pub fn is_old_style(id: &str) -> bool {
    let Some(base) = strip_version(id) else {
        return false;
    };
    let Some((archive, number)) = base.split_once('/') else {
        return false;
    };
    let (archive, subject) = match archive.split_once('.') {
        Some((a, s)) => (a, Some(s)),
        None => (archive, None),
    };
    let word = |s: &str, lower: bool| {
        !s.is_empty()
            && !s.starts_with('-')
            && !s.ends_with('-')
            && s.bytes().all(|b| {
                b == b'-'
                    || (if lower {
                        b.is_ascii_lowercase()
                    } else {
                        b.is_ascii_alphabetic()
                    })
            })
    };
    word(archive, true)
        && subject.is_none_or(|s| word(s, false))
        && number.len() == 7
        && all_digits(number)
        && is_year_month(&number[..4])
}

/// The id inside an Atom entry id such as `http://arxiv.org/abs/2101.00001v2` (also old
/// style, `http://arxiv.org/abs/hep-th/9901001v1`); other values are returned as given.
pub fn from_entry_url(url: &str) -> &str {
    match url.find("/abs/") {
        Some(i) => &url[i + "/abs/".len()..],
        None => url,
    }
}
