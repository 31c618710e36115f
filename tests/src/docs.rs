//! The documentation's examples as the tests that run them read them: fenced blocks with
//! the section they are in, a shell block's commands, and what an `export` line sets.

/// One fenced block: its text and the `## ` heading it is under.
pub struct Fenced {
    pub section: String,
    pub text: String,
}

/// The fenced blocks of `lang` (```` ```sh ````; `""` for blocks without one) in the
/// Markdown `text`, in order.
pub fn fenced(text: &str, lang: &str) -> Vec<Fenced> {
    let mut out = Vec::new();
    let mut section = String::new();
    // The language of the block we are in, and its text so far.
    let mut block: Option<(String, String)> = None;
    for line in text.lines() {
        match &mut block {
            None if line.starts_with("## ") => section = line.to_string(),
            None => {
                if let Some(opened) = line.trim().strip_prefix("```") {
                    block = Some((opened.trim().to_string(), String::new()));
                }
            }
            Some((opened, b)) if line.trim() == "```" => {
                if opened == lang {
                    out.push(Fenced {
                        section: section.clone(),
                        text: std::mem::take(b),
                    });
                }
                block = None;
            }
            Some((_, b)) => {
                b.push_str(line);
                b.push('\n');
            }
        }
    }
    out
}

/// The commands of a transcript (a block of `$ COMMAND` lines, each followed by what it
/// prints), each with its output.
pub fn transcript(block: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in block.lines() {
        match (line.strip_prefix("$ "), out.last_mut()) {
            (Some(command), _) => out.push((command.to_string(), String::new())),
            (None, Some((_, printed))) if !line.trim().is_empty() => {
                printed.push_str(line);
                printed.push('\n');
            }
            _ => {}
        }
    }
    out
}

/// The commands of a shell block: each logical line (`\` joins a line to the next) that
/// is not only a comment.
pub fn commands(block: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in block.lines() {
        match line.strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => {
                pending.push_str(line);
                let logical = std::mem::take(&mut pending);
                let logical = logical.trim();
                if !logical.is_empty() && !logical.starts_with('#') {
                    out.push(logical.to_string());
                }
            }
        }
    }
    out
}

/// For `export NAME=VALUE`: NAME, and a script that prints the value as the shell expands
/// it (run it where the line would run). `None` for any other line.
pub fn export(line: &str) -> Option<(String, String)> {
    let (name, _) = line.strip_prefix("export ")?.split_once('=')?;
    let name = name.trim().to_string();
    let script = format!("{line}\nprintf '%s' \"${name}\"");
    Some((name, script))
}
