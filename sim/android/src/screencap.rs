//! `screencap -p` and the SDK screenshot: paints the current screen (status
//! bar, view bounds, text as bars, focus, keyboard, launcher) into RGB pixels
//! and encodes a real PNG.

use crate::phone::{Node, Phone};

struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

fn parse_color(c: &str) -> Option<[u8; 3]> {
    let c = c.strip_prefix('#')?;
    if c.len() != 6 {
        return None;
    }
    let v = u32::from_str_radix(c, 16).ok()?;
    Some([(v >> 16) as u8, (v >> 8) as u8, v as u8])
}

impl Canvas {
    fn fill(&mut self, b: [i32; 4], rgb: [u8; 3]) {
        let x0 = b[0].clamp(0, self.w as i32) as usize;
        let x1 = b[2].clamp(0, self.w as i32) as usize;
        let y0 = b[1].clamp(0, self.h as i32) as usize;
        let y1 = b[3].clamp(0, self.h as i32) as usize;
        if x0 >= x1 {
            return;
        }
        for y in y0..y1 {
            let row = &mut self.px[(y * self.w + x0) * 3..(y * self.w + x1) * 3];
            for p in row.chunks_exact_mut(3) {
                p.copy_from_slice(&rgb);
            }
        }
    }

    fn frame(&mut self, b: [i32; 4], t: i32, rgb: [u8; 3]) {
        self.fill([b[0], b[1], b[2], b[1] + t], rgb);
        self.fill([b[0], b[3] - t, b[2], b[3]], rgb);
        self.fill([b[0], b[1], b[0] + t, b[3]], rgb);
        self.fill([b[2] - t, b[1], b[2], b[3]], rgb);
    }

    /// Text drawn as one bar per character group, so different texts give different pixels.
    fn text(&mut self, b: [i32; 4], text: &str, rgb: [u8; 3]) {
        let hgt = ((b[3] - b[1]) / 3).clamp(8, 48);
        let y0 = b[1] + ((b[3] - b[1]) - hgt) / 2;
        let mut x = b[0] + 24;
        for ch in text.chars() {
            let cw = 14 + (ch as i32 % 7) * 2;
            if x + cw > b[2] - 16 {
                break;
            }
            if ch != ' ' {
                self.fill([x, y0, x + cw, y0 + hgt], rgb);
            }
            x += cw + 6;
        }
    }
}

fn paint(c: &mut Canvas, n: &Node) {
    if !n.visible {
        return;
    }
    let color = n.color.as_deref().and_then(parse_color);
    if n.editable {
        c.fill(n.bounds, color.unwrap_or([241, 243, 244]));
        c.frame(n.bounds, if n.focused { 6 } else { 2 }, if n.focused { [26, 115, 232] } else { [154, 160, 166] });
    } else if let Some(rgb) = color {
        c.fill(n.bounds, rgb);
    } else if n.clickable {
        c.fill(n.bounds, [232, 240, 254]);
    }
    if n.checkable {
        let s = [n.bounds[0] + 8, n.bounds[1] + 20, n.bounds[0] + 68, n.bounds[1] + 80];
        c.frame(s, 4, [60, 64, 67]);
        if n.checked {
            c.fill([s[0] + 12, s[1] + 12, s[2] - 12, s[3] - 12], [26, 115, 232]);
        }
    }
    let text = n.shown_text();
    if !text.is_empty() {
        let ink = if color.is_some() && !n.editable { [255, 255, 255] } else { [32, 33, 36] };
        let b = if n.checkable { [n.bounds[0] + 80, n.bounds[1], n.bounds[2], n.bounds[3]] } else { n.bounds };
        c.text(b, &text, ink);
    }
    for ch in &n.children {
        paint(c, ch);
    }
}

/// RGB pixels of the current screen.
pub fn pixels(ph: &Phone) -> (u32, u32, Vec<u8>) {
    let (w, h) = (ph.width as usize, ph.height as usize);
    let mut c = Canvas { w, h, px: vec![255; w * h * 3] };
    match ph.foreground_tree() {
        Some(tree) => paint(&mut c, &tree),
        None => {
            c.fill([0, 0, w as i32, h as i32], [32, 33, 36]);
            for (i, app) in ph.apps.iter().filter(|a| a.installed).enumerate() {
                let (col, row) = ((i % 4) as i32, (i / 4) as i32);
                let b = [60 + col * 250, 300 + row * 300, 230 + col * 250, 470 + row * 300];
                let hash = app.package.bytes().fold(7u32, |a, x| a.wrapping_mul(31).wrapping_add(x as u32));
                c.fill(b, [(hash >> 16) as u8 | 64, (hash >> 8) as u8 | 64, hash as u8 | 64]);
            }
        }
    }
    c.fill([0, 0, w as i32, 80], [0, 0, 0]);
    if ph.keyboard {
        let top = h as i32 * 6 / 10;
        c.fill([0, top, w as i32, h as i32], [232, 234, 237]);
        for r in 0..4 {
            for k in 0..10 {
                let x = 10 + k * (w as i32 - 20) / 10;
                let y = top + 30 + r * 150;
                c.fill([x + 6, y, x + (w as i32 - 20) / 10 - 6, y + 120], [255, 255, 255]);
            }
        }
    }
    (w as u32, h as u32, c.px)
}

pub fn encode_png(w: u32, h: u32, rgb: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Fast);
        let mut wr = enc.write_header().expect("png header");
        wr.write_image_data(rgb).expect("png data");
    }
    out
}

pub fn png_of(ph: &Phone) -> (u32, u32, Vec<u8>) {
    let (w, h, px) = pixels(ph);
    (w, h, encode_png(w, h, &px))
}
