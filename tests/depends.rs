//! A check's `depends_on` (SPEC §6.2) through the APIs, the config file and
//! the dashboard, on both databases: the field round-trips, unknown slugs
//! and cycles are refused naming them, and `inhibited_by` shows what the
//! dispatcher recorded on the check's open incident.

mod common;

use common::api::call;
use common::{config_path, Backend, TestDb, TestServer};
use serde_json::{json, Value};

/// `method path` with `body` as JSON if any, and no API key: the status
/// and the body of the answer.
async fn send(s: &TestServer, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    call(s, method, path, None, body).await
}

/// The v1 error's message, after checking it is a 400 about `depends_on`.
fn refused(status: u16, e: &Value) -> String {
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["fields"][0]["field"], "depends_on", "{e}");
    e["error"]["message"].as_str().unwrap().to_string()
}

both_backends!(depends_on_round_trips_through_v1, |backend| async move {
    let s = TestServer::start(backend, "").await;
    s.create_check(json!({"slug": "db"})).await;
    s.create_check(json!({"slug": "dns"})).await;
    let c = s
        .create_check(json!({"slug": "app", "depends_on": ["db", "dns"]}))
        .await;
    assert_eq!(c["depends_on"], json!(["db", "dns"]));
    assert_eq!(c["inhibited_by"], json!([]));
    let got = s.get_json("/api/v1/checks/app").await;
    assert_eq!(got["depends_on"], json!(["db", "dns"]));
    // A check that names nothing shows an empty list.
    assert_eq!(
        s.get_json("/api/v1/checks/db").await["depends_on"],
        json!([])
    );

    // PATCH changes it; other fields keep theirs.
    let (st, v) = send(
        &s,
        "PATCH",
        "/api/v1/checks/app",
        Some(json!({"depends_on": ["dns"]})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["depends_on"], json!(["dns"]));
    let (st, v) = send(
        &s,
        "PATCH",
        "/api/v1/checks/app",
        Some(json!({"name": "The app"})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["depends_on"], json!(["dns"]));
    // null goes back to the default: nothing.
    let (st, v) = send(
        &s,
        "PATCH",
        "/api/v1/checks/app",
        Some(json!({"depends_on": null})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["depends_on"], json!([]));

    // PUT replaces the whole definition.
    let (st, v) = send(
        &s,
        "PUT",
        "/api/v1/checks/web",
        Some(json!({"depends_on": ["app"]})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["depends_on"], json!(["app"]));
    let (st, v) = send(&s, "PUT", "/api/v1/checks/web", Some(json!({}))).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["depends_on"], json!([]));

    // The list shows it too.
    let (_, list) = send(&s, "GET", "/api/v1/checks?slug=app", None).await;
    assert_eq!(list["checks"][0]["depends_on"], json!([]));
    s.stop().await;
});

both_backends!(unknown_slugs_are_refused_by_name, |backend| async move {
    let s = TestServer::start(backend, "").await;
    s.create_check(json!({"slug": "db"})).await;
    let (st, e) = send(
        &s,
        "POST",
        "/api/v1/checks",
        Some(json!({"slug": "app", "depends_on": ["db", "nightly-db"]})),
    )
    .await;
    let msg = refused(st, &e);
    assert!(
        msg.contains("\"nightly-db\" is not the slug of any check"),
        "{msg}"
    );
    assert!(!msg.contains("\"db\""), "{msg}");
    assert_eq!(s.db.count("SELECT COUNT(*) FROM checks").await, 1);

    // A check without a slug is held to the same rule.
    let (st, e) = send(
        &s,
        "POST",
        "/api/v1/checks",
        Some(json!({"name": "no slug", "depends_on": ["ghost"]})),
    )
    .await;
    assert!(refused(st, &e).contains("\"ghost\""));

    s.create_check(json!({"slug": "app"})).await;
    for (method, path) in [
        ("PATCH", "/api/v1/checks/app"),
        ("PUT", "/api/v1/checks/app"),
    ] {
        let (st, e) = send(&s, method, path, Some(json!({"depends_on": ["ghost"]}))).await;
        assert!(refused(st, &e).contains("\"ghost\""), "{method}");
    }
    // Validated alone before the graph: a bad slug, itself, twice.
    for (bad, why) in [
        (json!(["Not A Slug"]), "lowercase"),
        (json!(["app"]), "this check itself"),
        (json!(["db", "db"]), "listed twice"),
        (json!("db"), "invalid type"),
    ] {
        let (st, e) = send(
            &s,
            "PATCH",
            "/api/v1/checks/app",
            Some(json!({ "depends_on": bad })),
        )
        .await;
        assert!(refused(st, &e).contains(why), "{e}");
    }
    assert_eq!(
        s.get_json("/api/v1/checks/app").await["depends_on"],
        json!([])
    );
    s.stop().await;
});

both_backends!(cycles_are_refused_naming_the_cycle, |backend| async move {
    let s = TestServer::start(backend, "").await;
    s.create_check(json!({"slug": "a"})).await;
    s.create_check(json!({"slug": "b", "depends_on": ["a"]}))
        .await;
    // a → b → a
    let (st, e) = send(
        &s,
        "PATCH",
        "/api/v1/checks/a",
        Some(json!({"depends_on": ["b"]})),
    )
    .await;
    assert!(
        refused(st, &e).contains("depends_on: makes a cycle: a → b → a"),
        "{e}"
    );
    // a → c → b → a, by upsert
    let (st, e) = send(
        &s,
        "PUT",
        "/api/v1/checks/c",
        Some(json!({"depends_on": ["b"]})),
    )
    .await;
    assert_eq!(st, 201, "{e}");
    let (st, e) = send(
        &s,
        "PUT",
        "/api/v1/checks/a",
        Some(json!({"depends_on": ["c"]})),
    )
    .await;
    assert!(
        refused(st, &e).contains("makes a cycle: a → c → b → a"),
        "{e}"
    );
    assert_eq!(
        s.get_json("/api/v1/checks/a").await["depends_on"],
        json!([])
    );

    // Deleting a check others depend on is allowed: their depends_on keeps
    // the slug, which holds nothing while no check has it.
    let (st, _) = send(&s, "DELETE", "/api/v1/checks/b", None).await;
    assert_eq!(st, 204);
    assert_eq!(
        s.get_json("/api/v1/checks/c").await["depends_on"],
        json!(["b"])
    );
    // A new "b" (or one renamed to "b") must not close the cycle again.
    let (st, e) = send(
        &s,
        "POST",
        "/api/v1/checks",
        Some(json!({"slug": "b", "depends_on": ["c"]})),
    )
    .await;
    assert!(refused(st, &e).contains("makes a cycle: b → c → b"), "{e}");
    s.create_check(json!({"slug": "x", "depends_on": ["c"]}))
        .await;
    let (st, e) = send(&s, "PATCH", "/api/v1/checks/x", Some(json!({"slug": "b"}))).await;
    assert!(refused(st, &e).contains("makes a cycle: b → c → b"), "{e}");
    // Renamed without closing one, it is fine.
    let (st, e) = send(
        &s,
        "PATCH",
        "/api/v1/checks/x",
        Some(json!({"slug": "b", "depends_on": ["a"]})),
    )
    .await;
    assert_eq!(st, 200, "{e}");
    s.stop().await;
});

both_backends!(depends_on_is_an_extra_v3_field, |backend| async move {
    let s = TestServer::start(backend, "").await;
    s.create_check(json!({"slug": "db"})).await;
    let (st, c) = send(
        &s,
        "POST",
        "/api/v3/checks/",
        Some(json!({"name": "app", "slug": "app", "depends_on": ["db"]})),
    )
    .await;
    assert_eq!(st, 201, "{c}");
    assert_eq!(c["depends_on"], json!(["db"]));
    let uuid = c["uuid"].as_str().unwrap().to_string();
    let got = s.get_json(&format!("/api/v3/checks/{uuid}")).await;
    assert_eq!(got["depends_on"], json!(["db"]));
    // The native API sees the same.
    assert_eq!(
        s.get_json("/api/v1/checks/app").await["depends_on"],
        json!(["db"])
    );
    // An update without it keeps it; with it, replaces it.
    let path = format!("/api/v3/checks/{uuid}");
    let (st, v) = send(&s, "POST", &path, Some(json!({"desc": "d"}))).await;
    assert_eq!((st, &v["depends_on"]), (200, &json!(["db"])), "{v}");
    let (st, v) = send(&s, "POST", &path, Some(json!({"depends_on": []}))).await;
    assert_eq!((st, &v["depends_on"]), (200, &json!([])), "{v}");
    // Refusals in healthchecks' shape.
    let (st, e) = send(&s, "POST", &path, Some(json!({"depends_on": "db"}))).await;
    assert_eq!(st, 400);
    assert_eq!(
        e["error"],
        "json validation error: depends_on is not an array of strings"
    );
    let (st, e) = send(&s, "POST", &path, Some(json!({"depends_on": ["nope"]}))).await;
    assert_eq!(st, 400);
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("depends_on \"nope\" is not the slug"),
        "{e}"
    );
    let (st, e) = send(
        &s,
        "POST",
        "/api/v1/checks",
        Some(json!({"slug": "web", "depends_on": ["app"]})),
    )
    .await;
    assert_eq!(st, 201, "{e}");
    let (st, e) = send(&s, "POST", &path, Some(json!({"depends_on": ["web"]}))).await;
    assert_eq!(st, 400);
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("depends_on makes a cycle: app → web → app"),
        "{e}"
    );
    s.stop().await;
});

both_backends!(
    inhibited_by_shows_what_the_open_incident_holds,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        s.create_check(json!({"slug": "db"})).await;
        s.create_check(json!({"slug": "app", "depends_on": ["db"]}))
            .await;
        assert_eq!(
            s.get_json("/api/v1/checks/app").await["inhibited_by"],
            json!([])
        );
        // A resolved incident's holders are history, not state.
        s.db.sql(
            "INSERT INTO incidents (check_id, opened_at, status, reason, resolved_at, inhibited_by) \
             SELECT id, 1000, 'down', 'overdue', 2000, '[\"db\"]' FROM checks WHERE slug = 'app'",
        )
        .await;
        assert_eq!(
            s.get_json("/api/v1/checks/app").await["inhibited_by"],
            json!([])
        );
        // An open one that nothing holds (NULL, as the evaluator opens it).
        s.db.sql(
            "INSERT INTO incidents (check_id, opened_at, status, reason) \
             SELECT id, 3000, 'down', 'overdue' FROM checks WHERE slug = 'app'",
        )
        .await;
        assert_eq!(
            s.get_json("/api/v1/checks/app").await["inhibited_by"],
            json!([])
        );
        // The dispatcher records who holds it.
        s.db.sql(
            "UPDATE incidents SET inhibited_by = '[\"db\",\"dns\"]' WHERE resolved_at IS NULL",
        )
        .await;
        let v = s.get_json("/api/v1/checks/app").await;
        assert_eq!(v["inhibited_by"], json!(["db", "dns"]));
        let (_, list) = send(&s, "GET", "/api/v1/checks", None).await;
        let app = list["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["slug"] == "app")
            .unwrap();
        assert_eq!(app["inhibited_by"], json!(["db", "dns"]));
        assert_eq!(
            list["checks"][0]["inhibited_by"],
            json!([]),
            "db is not held"
        );

        // The dashboard links both ways.
        let (st, html) = send(&s, "GET", "/checks/app", None).await;
        assert_eq!(st, 200);
        let html = html.as_str().unwrap();
        let depends = section(html, "depends-on");
        assert!(
            depends.contains("<a href=\"/checks/db\">db</a>"),
            "{depends}"
        );
        let held = section(html, "inhibited-by");
        assert!(
            held.contains("<a href=\"/checks/db\">db</a>, <a href=\"/checks/dns\">dns</a>"),
            "{held}"
        );
        assert!(html.contains("its alerts are held while db is down or stalled (depends_on)"));
        // '[]' is not held either, and the page says nothing of it.
        s.db.sql("UPDATE incidents SET inhibited_by = '[]' WHERE resolved_at IS NULL")
            .await;
        assert_eq!(
            s.get_json("/api/v1/checks/app").await["inhibited_by"],
            json!([])
        );
        let (_, html) = send(&s, "GET", "/checks/app", None).await;
        assert!(!html.as_str().unwrap().contains("id=\"inhibited-by\""));
        let (_, html) = send(&s, "GET", "/checks/db", None).await;
        assert!(!html.as_str().unwrap().contains("id=\"depends-on\""));
        s.stop().await;
    }
);

/// The text of the `<dd id="…">` element.
fn section<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html
        .find(&format!("<dd id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no {id} in {html}"));
    let rest = &html[start..];
    &rest[..rest.find("</dd>").unwrap()]
}

const FILE: &str = r#"
[[checks]]
slug = "dns"

[[checks]]
slug = "db"
depends_on = ["dns"]

[[checks]]
slug = "app"
depends_on = ["db", "dns"]
"#;

both_backends!(
    config_checks_depend_on_each_other_and_reload_refuses_cycles,
    |backend| async move {
        let db = TestDb::new(backend).await;
        let s = TestServer::start_from_file(db, FILE).await;
        assert_eq!(
            s.get_json("/api/v1/checks/app").await["depends_on"],
            json!(["db", "dns"])
        );
        // An API check may depend on a config check.
        s.create_check(json!({"slug": "web", "depends_on": ["app"]}))
            .await;

        // A cycle in the file: refused, nothing changes.
        let cyclic = FILE.replace("slug = \"dns\"", "slug = \"dns\"\ndepends_on = [\"app\"]");
        std::fs::write(config_path(&s.db), s.db.config_toml(&cyclic)).unwrap();
        let (st, e) = send(&s, "POST", "/api/v1/reload", None).await;
        assert_eq!(st, 400, "{e}");
        assert_eq!(
            e["error"]["fields"][0]["field"], "checks[2].depends_on",
            "{e}"
        );
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("makes a cycle: app → dns → app"),
            "{e}"
        );
        assert_eq!(
            s.get_json("/api/v1/checks/dns").await["depends_on"],
            json!([])
        );

        // A slug the file does not declare: refused.
        let unknown = format!("{FILE}\n[[checks]]\nslug = \"cron\"\ndepends_on = [\"web\"]\n");
        std::fs::write(config_path(&s.db), s.db.config_toml(&unknown)).unwrap();
        let (st, e) = send(&s, "POST", "/api/v1/reload", None).await;
        assert_eq!(st, 400, "{e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("checks[3].depends_on: \"web\" is not the slug of a check in this file"),
            "{e}"
        );
        assert_eq!(
            s.db.count("SELECT COUNT(*) FROM checks WHERE slug = 'cron'")
                .await,
            0
        );

        // A cycle closed through an API check that owns a slug the file
        // declares: the file names "web" (owned by the API check, which
        // depends on app), and makes app depend on it.
        let through_api = format!(
            "{}\n[[checks]]\nslug = \"web\"\n",
            FILE.replace(
                "depends_on = [\"db\", \"dns\"]",
                "depends_on = [\"db\", \"web\"]"
            )
        );
        std::fs::write(config_path(&s.db), s.db.config_toml(&through_api)).unwrap();
        let (st, e) = send(&s, "POST", "/api/v1/reload", None).await;
        assert_eq!(st, 400, "{e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("makes a cycle with checks created through the API: app → web → app"),
            "{e}"
        );
        assert_eq!(
            s.get_json("/api/v1/checks/app").await["depends_on"],
            json!(["db", "dns"])
        );

        // Removing a config check others depend on is allowed.
        let fewer =
            "[[checks]]\nslug = \"dns\"\n\n[[checks]]\nslug = \"db\"\ndepends_on = [\"dns\"]\n";
        std::fs::write(config_path(&s.db), s.db.config_toml(fewer)).unwrap();
        let (st, r) = send(&s, "POST", "/api/v1/reload", None).await;
        assert_eq!(st, 200, "{r}");
        assert_eq!(r["deleted"], json!(["app"]));
        assert_eq!(
            s.get_json("/api/v1/checks/web").await["depends_on"],
            json!(["app"])
        );
        s.stop().await;
    }
);

#[tokio::test]
async fn v1_documents_depends_on_and_inhibited_by() {
    let s = TestServer::start(Backend::Sqlite, "").await;
    let doc = s.get_json("/api/v1/openapi.json").await;
    let schemas = &doc["components"]["schemas"];
    assert!(schemas["CheckInputDoc"]["properties"]["depends_on"].is_object());
    assert!(schemas["CheckView"]["properties"]["depends_on"].is_object());
    assert!(schemas["CheckView"]["properties"]["inhibited_by"].is_object());
    s.stop().await;
}
