//! What `pack` reports: every problem it found, each at a file, line, column and field.

use std::fmt;

use super::yaml::Pos;

/// One thing wrong with a manifest (or a document it refers to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file, as it was named to `pack`.
    pub file: String,
    /// The line, from 1 (0: the file as a whole).
    pub line: usize,
    /// The column, from 1 (0: the file as a whole).
    pub column: usize,
    /// Where in the manifest, like `actions[1].execute` (empty: the document itself).
    pub field: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Which kind of failure a [`PackError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackErrorKind {
    /// The manifest file could not be read (the CLI's exit code 2).
    Unreadable,
    /// An option is malformed, such as `--allow-host` with a scheme (exit code 2).
    Options,
    /// The manifest is wrong (exit code 1): the problems say where and why.
    Invalid,
    /// The manifest is fine but could not be written into the interpreter (exit code 1).
    Build,
}

/// Why a manifest could not be packed: one or more problems, in the order found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackError {
    /// The kind of failure.
    pub kind: PackErrorKind,
    /// Every problem found (at least one).
    pub problems: Vec<Problem>,
}

impl PackError {
    /// A failure that is not about a place in the manifest.
    pub(crate) fn whole(kind: PackErrorKind, file: &str, message: impl Into<String>) -> Self {
        PackError {
            kind,
            problems: vec![Problem {
                file: file.to_string(),
                line: 0,
                column: 0,
                field: String::new(),
                message: message.into(),
            }],
        }
    }
}

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PackError {}

/// Collects the problems of one pass over a manifest.
#[derive(Debug, Default)]
pub(crate) struct Problems {
    file: String,
    list: Vec<Problem>,
}

impl Problems {
    pub(crate) fn new(file: &str) -> Self {
        Problems {
            file: file.to_string(),
            list: Vec::new(),
        }
    }

    /// Records a problem of the manifest at `pos`, in `field`.
    pub(crate) fn at(&mut self, pos: Pos, field: &str, message: impl Into<String>) {
        let file = self.file.clone();
        self.in_file(&file, pos, field, message);
    }

    /// Records a problem of another file (an OpenAPI document).
    pub(crate) fn in_file(
        &mut self,
        file: &str,
        pos: Pos,
        field: &str,
        message: impl Into<String>,
    ) {
        let problem = Problem {
            file: file.to_string(),
            line: pos.line,
            column: pos.column,
            field: field.to_string(),
            message: message.into(),
        };
        if !self.list.contains(&problem) {
            self.list.push(problem);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(crate) fn into_error(self) -> PackError {
        PackError {
            kind: PackErrorKind::Invalid,
            problems: self.list,
        }
    }
}
