//! Tool and connector descriptions as Markdown, rendered so that nothing in them can act.
//!
//! Descriptions come from connectors and container images, which an operator installs
//! but does not write: they are untrusted text. They are parsed with `pulldown-cmark`
//! (CommonMark, maintained, no unsafe HTML pass-through of its own choosing) and every
//! event that could carry markup or fetch something is neutralised before the HTML is
//! written:
//! - raw HTML (block or inline) becomes text, escaped like any other text;
//! - images become their alt text (a page loads nothing a description names);
//! - links keep their text, and their target only when it is `http:`, `https:` or
//!   `mailto:` (a `javascript:` or `data:` link is text only), and open with
//!   `rel="nofollow noopener noreferrer"`.
//!
//! The Content-Security-Policy of the console forbids inline script on top of this.

use maud::{Markup, PreEscaped};
use pulldown_cmark::{Event, LinkType, Options, Parser, Tag, TagEnd};

/// Whether a link target may stay a link.
fn safe_target(url: &str) -> bool {
    let lower = url.trim_start().to_ascii_lowercase();
    lower.starts_with("https://") || lower.starts_with("http://") || lower.starts_with("mailto:")
}

/// `text` (Markdown) as HTML safe to place in a page.
pub fn render(text: &str) -> Markup {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    // Links whose target is refused are dropped tag and all; their text stays. Nested
    // links cannot occur (CommonMark forbids them), so one flag is enough.
    let mut dropped_link = false;
    let mut in_image = 0usize;
    let events = Parser::new_ext(text, options).filter_map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Some(Event::Text(raw)),
        Event::Start(Tag::Image { .. }) => {
            in_image += 1;
            None
        }
        Event::End(TagEnd::Image) => {
            in_image = in_image.saturating_sub(1);
            None
        }
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) => {
            // An autolinked e-mail address is written as `mailto:` by the renderer.
            let email = link_type == LinkType::Email;
            if in_image == 0 && (email || safe_target(&dest_url)) {
                Some(Event::Start(Tag::Link {
                    link_type,
                    dest_url,
                    title,
                    id,
                }))
            } else {
                dropped_link = true;
                None
            }
        }
        Event::End(TagEnd::Link) if dropped_link => {
            dropped_link = false;
            None
        }
        other => Some(other),
    });
    let mut out = String::with_capacity(text.len() + text.len() / 2);
    pulldown_cmark::html::push_html(&mut out, events);
    // Links leave the console without telling the other site where from.
    let out = out.replace("<a href=", "<a rel=\"nofollow noopener noreferrer\" href=");
    PreEscaped(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn html(text: &str) -> String {
        render(text).into_string()
    }

    #[test]
    fn markdown_is_rendered() {
        let page = html("Echoes `text` back, **bold** and _soft_.\n\n- one\n- two");
        assert!(page.contains("<code>text</code>"), "{page}");
        assert!(page.contains("<strong>bold</strong>"), "{page}");
        assert!(page.contains("<em>soft</em>"), "{page}");
        assert!(page.contains("<li>one</li>"), "{page}");
    }

    #[test]
    fn html_in_a_description_is_inert() {
        let page = html(
            "Hi <script>alert(1)</script> there <img src=x onerror=alert(2)>\n\n\
             <div onclick=\"alert(3)\">block</div>\n\n<iframe src=\"https://evil.example\"></iframe>",
        );
        for forbidden in ["<script", "<img", "<div", "<iframe"] {
            assert!(!page.contains(forbidden), "`{forbidden}` passed: {page}");
        }
        // The only elements are the paragraphs Markdown made: every attribute is text.
        let tags: Vec<&str> = page
            .split('<')
            .skip(1)
            .map(|t| t.split('>').next().unwrap_or(""))
            .collect();
        assert!(tags.iter().all(|t| *t == "p" || *t == "/p"), "{tags:?}");
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{page}"
        );
        assert!(
            page.contains("&lt;img src=x onerror=alert(2)&gt;"),
            "{page}"
        );
    }

    #[test]
    fn links_keep_only_safe_targets_and_images_load_nothing() {
        let page = html(
            "[docs](https://example.com/docs) [bad](javascript:alert(1)) \
             [data](data:text/html,x) ![pixel](https://tracker.example/p.png) <dev@example.com>",
        );
        assert!(
            page.contains(
                "<a rel=\"nofollow noopener noreferrer\" href=\"https://example.com/docs\">docs</a>"
            ),
            "{page}"
        );
        assert!(!page.contains("javascript:"), "{page}");
        assert!(!page.contains("data:text"), "{page}");
        assert!(page.contains("bad") && page.contains("data"), "{page}");
        assert!(
            !page.contains("<img") && !page.contains("tracker.example"),
            "{page}"
        );
        assert!(page.contains("pixel"), "the alt text stays: {page}");
        assert!(page.contains("href=\"mailto:dev@example.com\""), "{page}");
    }
}
