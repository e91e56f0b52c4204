//! The SVG charts of the benches (`bench-load`, `bench-serve`): one writer of the document,
//! its text (escaped) and its shapes, so every chart is well-formed XML whatever its labels
//! hold.

use std::fmt::Write as _;

/// An SVG document being written: white background, sans-serif 12 px text.
pub struct Svg(String);

impl Svg {
    /// A `width` × `height` document.
    pub fn new(width: f64, height: f64) -> Svg {
        Svg(format!(
            "<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n"
        ))
    }

    /// `text` at (`x`, `y`), escaped; `attrs` are more attributes (`text-anchor='end'`).
    pub fn text(&mut self, x: f64, y: f64, attrs: &str, text: &str) {
        let _ = writeln!(
            self.0,
            "<text x='{x}' y='{y}'{}>{}</text>",
            spaced(attrs),
            escape(text)
        );
    }

    /// A rectangle filled with `fill`; `attrs` are more attributes (`opacity='0.35'`).
    pub fn rect(&mut self, x: f64, y: f64, width: f64, height: f64, fill: &str, attrs: &str) {
        let _ = writeln!(
            self.0,
            "<rect x='{x}' y='{y}' width='{width:.1}' height='{height}' fill='{fill}'{}/>",
            spaced(attrs)
        );
    }

    /// A line from (`x1`, `y1`) to (`x2`, `y2`) in `stroke`; `attrs` are more attributes.
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    pub fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), stroke: &str, attrs: &str) {
        let _ = writeln!(
            self.0,
            "<line x1='{x1}' y1='{y1}' x2='{x2}' y2='{y2}' stroke='{stroke}'{}/>",
            spaced(attrs)
        );
    }

    /// A dot of radius `r` at (`x`, `y`).
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    pub fn circle(&mut self, x: f64, y: f64, r: f64, fill: &str) {
        let _ = writeln!(self.0, "<circle cx='{x}' cy='{y}' r='{r}' fill='{fill}'/>");
    }

    /// The finished document.
    pub fn finish(mut self) -> String {
        self.0.push_str("</svg>\n");
        self.0
    }
}

/// ` attrs`, or nothing.
fn spaced(attrs: &str) -> String {
    if attrs.is_empty() {
        String::new()
    } else {
        format!(" {attrs}")
    }
}

/// Text as XML character data: `&`, `<`, `>` and quotes escaped.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&apos;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped_and_the_document_is_closed() {
        let mut s = Svg::new(100.0, 50.0);
        s.text(1.0, 2.0, "text-anchor='end'", "a & <b> 'c'");
        s.rect(0.0, 0.0, 10.0, 5.0, "#fff", "");
        s.line((0.0, 0.0), (1.0, 1.0), "#000", "stroke-width='2'");
        s.circle(1.0, 1.0, 4.0, "#0f0");
        let doc = s.finish();
        assert!(doc.starts_with("<svg "), "{doc}");
        assert!(doc.ends_with("</svg>\n"), "{doc}");
        assert!(
            doc.contains(
                "<text x='1' y='2' text-anchor='end'>a &amp; &lt;b&gt; &apos;c&apos;</text>"
            ),
            "{doc}"
        );
        assert!(doc.contains("stroke='#000' stroke-width='2'/>"), "{doc}");
        assert_eq!(doc.matches('<').count(), doc.matches('>').count(), "{doc}");
    }
}
