//! `uiautomator dump`: the accessibility XML of the current screen in stock
//! Android's format (hierarchy/node attributes in stock order).

use std::fmt::Write;

use crate::phone::{Node, Phone};

/// XML attribute escaping (shared with the UIA runtime's snapshot XML).
pub(crate) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            '\n' => o.push_str("&#10;"),
            c => o.push(c),
        }
    }
    o
}

fn node(out: &mut String, n: &Node, index: usize, package: &str) {
    if !n.visible {
        return;
    }
    let b = n.bounds;
    let _ = write!(
        out,
        "<node index=\"{index}\" text=\"{}\" resource-id=\"{}\" class=\"{}\" package=\"{}\" content-desc=\"{}\" checkable=\"{}\" checked=\"{}\" clickable=\"{}\" enabled=\"{}\" focusable=\"{}\" focused=\"{}\" scrollable=\"{}\" long-clickable=\"{}\" password=\"{}\" selected=\"{}\" bounds=\"[{},{}][{},{}]\"",
        esc(&n.shown_text()),
        esc(n.resource_name.as_deref().unwrap_or("")),
        esc(&n.class),
        esc(package),
        esc(n.desc.as_deref().unwrap_or("")),
        n.checkable,
        n.checked,
        n.clickable,
        n.enabled,
        n.focusable,
        n.focused,
        n.scrollable,
        n.long_clickable,
        n.password,
        n.selected,
        b[0],
        b[1],
        b[2],
        b[3]
    );
    let kids: Vec<&Node> = n.children.iter().filter(|c| c.visible).collect();
    if kids.is_empty() {
        out.push_str(" />");
    } else {
        out.push('>');
        for (i, c) in kids.into_iter().enumerate() {
            node(out, c, i, package);
        }
        out.push_str("</node>");
    }
}

pub fn dump(ph: &Phone) -> String {
    let mut out = String::from("<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\">");
    if let Some(d) = &ph.system_dialog {
        node(&mut out, &d.tree(ph.width, ph.height), 0, &d.package);
        out.push_str("</hierarchy>");
        return out;
    }
    match (ph.foreground_app(), ph.foreground_tree()) {
        (Some(app), Some(tree)) => node(&mut out, &tree, 0, &app.package),
        _ => {
            let _ = write!(out, "<node index=\"0\" text=\"\" resource-id=\"\" class=\"android.widget.FrameLayout\" package=\"{}\" content-desc=\"\" checkable=\"false\" checked=\"false\" clickable=\"false\" enabled=\"true\" focusable=\"false\" focused=\"false\" scrollable=\"false\" long-clickable=\"false\" password=\"false\" selected=\"false\" bounds=\"[0,0][{},{}]\">", crate::dumpsys::LAUNCHER_PKG, ph.width, ph.height);
            for (i, a) in ph.apps.iter().filter(|a| a.installed).enumerate() {
                let (col, row) = ((i % 4) as i32, (i / 4) as i32);
                let label = a.package.rsplit('.').next().unwrap_or(&a.package);
                let _ = write!(out, "<node index=\"{i}\" text=\"{}\" resource-id=\"\" class=\"android.widget.TextView\" package=\"{}\" content-desc=\"{}\" checkable=\"false\" checked=\"false\" clickable=\"true\" enabled=\"true\" focusable=\"true\" focused=\"false\" scrollable=\"false\" long-clickable=\"true\" password=\"false\" selected=\"false\" bounds=\"[{},{}][{},{}]\" />", esc(label), crate::dumpsys::LAUNCHER_PKG, esc(label), 60 + col * 250, 300 + row * 300, 230 + col * 250, 470 + row * 300);
            }
            out.push_str("</node>");
        }
    }
    out.push_str("</hierarchy>");
    out
}
