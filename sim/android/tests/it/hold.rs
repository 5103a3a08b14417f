//! `hold` on one device of a four-device simulator: that device's `input` takes
//! effect but its caller waits until the release, while the other devices'
//! `input` calls run to completion meanwhile (no device waits on another).

use serde_json::json;

use crate::support::Env;

#[test]
fn a_held_device_keeps_its_caller_waiting_while_the_others_complete() {
    let env = Env::start(4);
    let serials = env.serials();
    assert_eq!(env.control(json!({ "op": "devices" }))["devices"].as_array().unwrap().len(), 4);
    let held = env.control(json!({ "op": "hold", "serial": serials[0], "on": true }));
    assert_eq!(held["held"], json!(true), "{held}");

    std::thread::scope(|scope| {
        let first = scope.spawn(|| env.shell_on(&serials[0], "input keyevent 4; echo done"));
        // Ground truth: the key reached device 0 and its reply is in hand.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while env.control(json!({ "op": "truth", "serial": serials[0], "kind": "held" }))["items"].as_array().unwrap().is_empty() {
            assert!(std::time::Instant::now() < until, "device 0 never received its key");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        for s in &serials[1..] {
            let (out, err, code) = env.shell_on(s, "input keyevent 4; echo done");
            assert_eq!((out.trim(), code), ("done", 0), "{s}: {err}");
            let keys = env.control(json!({ "op": "truth", "serial": s, "kind": "keyevent" }))["items"].as_array().unwrap().len();
            assert_eq!(keys, 1, "{s}: one key on the phone");
        }
        assert!(!first.is_finished(), "device 0's caller is still waiting");
        let keys = env.control(json!({ "op": "truth", "serial": serials[0], "kind": "keyevent" }))["items"].as_array().unwrap().len();
        assert_eq!(keys, 1, "the held key already took effect");
        let released = env.control(json!({ "op": "hold", "serial": serials[0], "on": false }));
        assert_eq!((released["held"].clone(), released["ok"].clone()), (json!(false), json!(true)), "{released}");
        let (out, _, code) = first.join().unwrap();
        assert_eq!((out.trim(), code), ("done", 0));
    });
    let released = env.control(json!({ "op": "truth", "serial": serials[0], "kind": "released" }));
    assert_eq!(released["items"][0]["data"]["waiting"], json!(1), "{released}");
    for s in &serials {
        assert_eq!(env.control(json!({ "op": "truth", "serial": s, "kind": "keyevent" }))["items"].as_array().unwrap().len(), 1, "{s}: exactly one key");
    }
}
