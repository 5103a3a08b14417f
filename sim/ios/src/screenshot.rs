//! Renders the laid-out screen into a real PNG at the device's pixel scale:
//! flat fills per element kind and a block per character of visible text, so
//! a screenshot changes when the screen does (a typed value, a new label).

use crate::native::{El, Kind};

struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Canvas {
    fn fill(&mut self, frame: [f64; 4], scale: f64, rgb: [u8; 3]) {
        let x0 = ((frame[0] * scale).max(0.0) as usize).min(self.w);
        let y0 = ((frame[1] * scale).max(0.0) as usize).min(self.h);
        let x1 = (((frame[0] + frame[2]) * scale).max(0.0) as usize).min(self.w);
        let y1 = (((frame[1] + frame[3]) * scale).max(0.0) as usize).min(self.h);
        for y in y0..y1 {
            let row = &mut self.px[(y * self.w + x0) * 3..(y * self.w + x1) * 3];
            for p in row.chunks_exact_mut(3) {
                p.copy_from_slice(&rgb);
            }
        }
    }

    /// One block per character, like a line of text at 17 pt.
    fn text(&mut self, frame: [f64; 4], scale: f64, text: &str, rgb: [u8; 3]) {
        let (mut x, y) = (frame[0] + 8.0, frame[1] + (frame[3] - 12.0).max(0.0) / 2.0);
        for c in text.chars() {
            if x + 7.0 > frame[0] + frame[2] {
                break;
            }
            if !c.is_whitespace() {
                let hgt = if c.is_uppercase() || c.is_ascii_digit() { 12.0 } else { 9.0 };
                self.fill([x, y + 12.0 - hgt, 6.0, hgt], scale, rgb);
            }
            x += 8.0;
        }
    }
}

fn draw(c: &mut Canvas, e: &El, scale: f64) {
    match e.kind {
        Kind::NavigationBar | Kind::Toolbar => c.fill(e.frame, scale, [242, 242, 247]),
        Kind::Button | Kind::Flutter("control") => {
            c.fill(e.frame, scale, if e.enabled { [0, 122, 255] } else { [174, 174, 178] });
            c.text(e.frame, scale, e.label.as_deref().unwrap_or(""), [255, 255, 255]);
        }
        Kind::TextField | Kind::SecureTextField | Kind::Flutter("input") => {
            c.fill(e.frame, scale, [199, 199, 204]);
            c.fill([e.frame[0] + 1.0, e.frame[1] + 1.0, e.frame[2] - 2.0, e.frame[3] - 2.0], scale, [255, 255, 255]);
            let shown = match (e.kind, e.text.as_deref()) {
                (_, Some("")) | (_, None) => (e.placeholder.clone().unwrap_or_default(), [174, 174, 178]),
                (Kind::SecureTextField, Some(t)) => ("•".repeat(t.chars().count()), [0, 0, 0]),
                (_, Some(t)) => (t.to_string(), [0, 0, 0]),
            };
            c.text(e.frame, scale, &shown.0, shown.1);
        }
        Kind::StaticText | Kind::Flutter(_) => c.text(e.frame, scale, e.text.as_deref().or(e.label.as_deref()).unwrap_or(""), [28, 28, 30]),
        Kind::WebView => c.fill(e.frame, scale, [250, 250, 255]),
        Kind::FlutterView => c.fill(e.frame, scale, [246, 240, 255]),
        Kind::Window | Kind::View => c.fill(e.frame, scale, [255, 255, 255]),
    }
    for k in &e.children {
        draw(c, k, scale);
    }
}

/// (width px, height px, PNG bytes) of `tree` (the window) at `scale`.
pub fn render(tree: &El, scale: f64) -> (u32, u32, Vec<u8>) {
    let w = (tree.frame[2] * scale).round().max(1.0) as usize;
    let h = (tree.frame[3] * scale).round().max(1.0) as usize;
    let mut c = Canvas { w, h, px: vec![255; w * h * 3] };
    draw(&mut c, tree, scale);
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w as u32, h as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Fast);
        if let Ok(mut wr) = enc.write_header() {
            let _ = wr.write_image_data(&c.px);
        }
    }
    (w as u32, h as u32, out)
}
