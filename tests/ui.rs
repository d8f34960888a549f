//! The web dashboard against the real server: login and its cookie, CSRF on
//! every state-changing form, escaping, filters, basic auth.

mod common;

use std::time::Duration;

use common::TestServer;
use reqwest::redirect::Policy;
use serde_json::{json, Value};

const READ: &str = "read-key-0123456789abcdef";
const WRITE: &str = "write-key-0123456789abcdef";

fn keys() -> String {
    format!(
        "[[api_keys]]\nname = \"ro\"\nscope = \"read\"\nkey = \"{READ}\"\n\
         [[api_keys]]\nname = \"rw\"\nscope = \"write\"\nkey = \"{WRITE}\"\n"
    )
}

/// A client that shows redirects instead of following them, with no cookie jar.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Creates a check with a write key.
async fn create(s: &TestServer, body: Value) -> Value {
    let r = s
        .client
        .post(s.url("/api/v1/checks"))
        .header("x-api-key", WRITE)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    r.json().await.unwrap()
}

/// The CSRF token in a page's first form.
fn csrf_of(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no csrf field in {html}"));
    let rest = &html[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// Signs in with `key` through the login form; returns the Set-Cookie header.
async fn login(s: &TestServer, key: &str) -> String {
    let c = browser();
    let page = c.get(s.url("/login")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let csrf = csrf_of(&page.text().await.unwrap());
    let r = c
        .post(s.url("/login"))
        .form(&[("key", key), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "login with {key}");
    assert_eq!(r.headers()["location"], "/");
    r.headers()["set-cookie"].to_str().unwrap().to_string()
}

/// The `name=value` part of a Set-Cookie header.
fn cookie_pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().to_string()
}

async fn page(s: &TestServer, path: &str, cookie: &str) -> (u16, String) {
    let r = browser()
        .get(s.url(path))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn status_of(s: &TestServer, uuid: &str) -> String {
    let r = s
        .client
        .get(s.url(&format!("/api/v1/checks/{uuid}")))
        .header("x-api-key", READ)
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    v["status"].as_str().unwrap().to_string()
}

both_backends!(login_sets_a_safe_cookie, |backend| async move {
    let s = TestServer::start(backend, &keys()).await;
    create(&s, json!({"slug": "nightly", "interval": "1h"})).await;

    // Not signed in: to the login form.
    let r = browser().get(s.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/login");

    let c = browser();
    let form = c
        .get(s.url("/login"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(form.contains("type=\"password\""), "{form}");
    let csrf = csrf_of(&form);

    // The login form itself refuses a post without its token.
    let r = c
        .post(s.url("/login"))
        .form(&[("key", READ)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("set-cookie").is_none());

    let r = c
        .post(s.url("/login"))
        .form(&[("key", "not-a-key-0123456789"), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("set-cookie").is_none());
    assert!(r.text().await.unwrap().contains("Wrong API key"));

    let set = login(&s, READ).await;
    assert!(set.starts_with("overdue_key="), "{set}");
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(flag), "{flag} missing: {set}");
    }
    // base_url is http: no Secure flag, or the browser would drop the cookie.
    assert!(!set.contains("Secure"), "{set}");
    // The key is not in the cookie in clear text.
    assert!(!set.contains(READ), "{set}");

    let (code, html) = page(&s, "/", &cookie_pair(&set)).await;
    assert_eq!(code, 200);
    assert!(html.contains(">nightly</a>"), "{html}");
    // A read key sees no buttons.
    let (_, check) = page(&s, "/checks/nightly", &cookie_pair(&set)).await;
    assert!(!check.contains("id=\"pause\""), "{check}");

    // A forged cookie is no login.
    let (code, _) = page(&s, "/", "overdue_key=6e6f7065").await;
    assert_eq!(code, 303);

    // Sign out clears the cookie (with the CSRF token).
    let (_, html) = page(&s, "/", &cookie_pair(&set)).await;
    let r = browser()
        .post(s.url("/logout"))
        .header("cookie", cookie_pair(&set))
        .form(&[("csrf", csrf_of(&html))])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let cleared = r.headers()["set-cookie"].to_str().unwrap();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
});

both_backends!(
    secure_flag_follows_base_url_or_config,
    |backend| async move {
        let s = TestServer::start(
            backend,
            &format!("base_url = \"https://overdue.example\"\n{}", keys()),
        )
        .await;
        assert!(login(&s, READ).await.contains("; Secure"));
        let db = s.stop().await;

        let s = TestServer::start_on(
            db,
            &format!(
                "base_url = \"https://overdue.example\"\n{}[dashboard]\nsecure_cookie = false\n",
                keys()
            ),
        )
        .await;
        assert!(!login(&s, READ).await.contains("Secure"));
        let db = s.stop().await;

        let s = TestServer::start_on(
            db,
            &format!("{}[dashboard]\nsecure_cookie = true\n", keys()),
        )
        .await;
        assert!(login(&s, READ).await.contains("; Secure"));
    }
);

both_backends!(
    pause_and_resume_need_csrf_and_a_write_key,
    |backend| async move {
        let s = TestServer::start(backend, &keys()).await;
        let c = create(&s, json!({"slug": "job", "interval": "1h"})).await;
        let uuid = c["uuid"].as_str().unwrap().to_string();
        let writer = cookie_pair(&login(&s, WRITE).await);
        let reader = cookie_pair(&login(&s, READ).await);
        let (_, html) = page(&s, "/checks/job", &writer).await;
        assert!(html.contains("id=\"pause\""), "{html}");
        let token = csrf_of(&html);
        let (_, html) = page(&s, "/checks/job", &reader).await;
        let reader_token = csrf_of(&html);
        assert_ne!(token, reader_token);

        let post = |cookie: String, path: String, csrf: Option<String>| {
            let url = s.url(&path);
            async move {
                let mut form = vec![];
                if let Some(t) = csrf {
                    form.push(("csrf", t));
                }
                browser()
                    .post(url)
                    .header("cookie", cookie)
                    .form(&form)
                    .send()
                    .await
                    .unwrap()
            }
        };
        let pause = format!("/checks/{uuid}/pause");
        // No token, or another session's token: refused, nothing changes.
        let r = post(writer.clone(), pause.clone(), None).await;
        assert_eq!(r.status(), 403);
        assert!(r.text().await.unwrap().contains("CSRF"));
        let r = post(writer.clone(), pause.clone(), Some(reader_token.clone())).await;
        assert_eq!(r.status(), 403);
        assert_eq!(status_of(&s, &uuid).await, "new");
        // A read key with its own valid token still cannot write.
        let r = post(reader.clone(), pause.clone(), Some(reader_token)).await;
        assert_eq!(r.status(), 403);
        assert!(r.text().await.unwrap().contains("write key"));
        assert_eq!(status_of(&s, &uuid).await, "new");
        // Not signed in at all: to the login form.
        let r = post(String::new(), pause.clone(), Some(token.clone())).await;
        assert_eq!(r.status(), 303);
        assert_eq!(r.headers()["location"], "/login");

        let r = post(writer.clone(), pause, Some(token.clone())).await;
        assert_eq!(r.status(), 303);
        assert_eq!(r.headers()["location"], format!("/checks/{uuid}"));
        assert_eq!(status_of(&s, &uuid).await, "paused");
        let (_, html) = page(&s, "/checks/job", &writer).await;
        assert!(html.contains("id=\"resume\""), "{html}");

        let r = post(
            writer.clone(),
            format!("/checks/{uuid}/resume"),
            Some(token),
        )
        .await;
        assert_eq!(r.status(), 303);
        assert_eq!(status_of(&s, &uuid).await, "new");
    }
);

both_backends!(user_text_is_escaped, |backend| async move {
    let s = TestServer::start(backend, &keys()).await;
    let evil = "<script>alert(1)</script>";
    let c = create(
        &s,
        json!({"name": evil, "description": evil, "interval": "1h",
               "labels": {"team": "\"><img src=x onerror=alert(2)>"}}),
    )
    .await;
    let uuid = c["uuid"].as_str().unwrap();
    let r = s
        .client
        .post(s.url(&format!("/ping/{uuid}/fail")))
        .header("user-agent", evil)
        .body(evil)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let cookie = cookie_pair(&login(&s, READ).await);
    for path in ["/".to_string(), format!("/checks/{uuid}")] {
        let (code, html) = page(&s, &path, &cookie).await;
        assert_eq!(code, 200);
        assert!(!html.contains("<script>"), "{path}: {html}");
        assert!(!html.contains("<img src=x"), "{path}: {html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;"),
            "{path}: {html}"
        );
    }
    // The SVG badge escapes the title too.
    let v3 = s
        .client
        .get(s.url(&format!("/api/v3/checks/{uuid}")))
        .header("x-api-key", READ)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let svg = s
        .client
        .get(
            v3["badge_url"]
                .as_str()
                .unwrap()
                .replace("http://localhost:8080", &s.base),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!svg.contains("<script>"), "{svg}");
});

both_backends!(list_shows_status_and_filters, |backend| async move {
    let s = TestServer::start(backend, &keys()).await;
    let down = create(
        &s,
        json!({"slug": "broken-job", "interval": "1h", "labels": {"team": "data"}}),
    )
    .await;
    let up = create(
        &s,
        json!({"slug": "fine-job", "interval": "1h", "labels": {"team": "web"},
               "active_hours": [{"start": "18:00", "end": "09:00"}]}),
    )
    .await;
    let r = s
        .client
        .post(s.url(&format!("/ping/{}/fail", down["uuid"].as_str().unwrap())))
        .body("disk full")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let up_uuid = up["uuid"].as_str().unwrap();
    for items in [3, 5, 0, 8] {
        s.ping(&format!("/ping/{up_uuid}?items={items}")).await;
    }
    let cookie = cookie_pair(&login(&s, READ).await);

    let (_, html) = page(&s, "/", &cookie).await;
    // Status in words and colour class; down sorts first.
    assert!(
        html.contains("<span class=\"status st-down\">down</span>"),
        "{html}"
    );
    assert!(html.contains("the job reported failure"), "{html}");
    assert!(html.find("broken-job").unwrap() < html.find("fine-job").unwrap());
    assert!(html.contains("<polyline"), "sparkline missing: {html}");
    assert!(html.contains("just now"), "{html}");

    let (_, html) = page(&s, "/?status=down", &cookie).await;
    assert!(
        html.contains("broken-job") && !html.contains(">fine-job<"),
        "{html}"
    );
    let (_, html) = page(&s, "/?label=team%3Dweb", &cookie).await;
    assert!(
        !html.contains(">broken-job<") && html.contains(">fine-job<"),
        "{html}"
    );
    let (_, html) = page(&s, "/?label=team", &cookie).await;
    assert!(
        html.contains(">broken-job<") && html.contains(">fine-job<"),
        "{html}"
    );

    // The check page: why it is down, the body, the rules in words.
    let (code, html) = page(&s, "/checks/broken-job", &cookie).await;
    assert_eq!(code, 200);
    assert!(html.contains("Down: the job reported failure"), "{html}");
    assert!(html.contains("<pre>disk full</pre>"), "{html}");
    assert!(html.contains("every 1h"), "{html}");
    let (_, html) = page(&s, &format!("/checks/{up_uuid}"), &cookie).await;
    assert!(html.contains("18:00–09:00 (UTC), every day"), "{html}");
    assert!(html.contains("class=\"bar\""), "{html}");

    // The incident the evaluator opens shows up on the page.
    let mut seen = false;
    for _ in 0..100 {
        let (_, html) = page(&s, "/checks/broken-job", &cookie).await;
        if html.contains("<strong>open</strong>") {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen, "incident never listed");

    let (code, _) = page(&s, "/checks/no-such-check", &cookie).await;
    assert_eq!(code, 404);
});

both_backends!(basic_auth_users_from_the_config, |backend| async move {
    let s = TestServer::start(
        backend,
        &format!(
            "{}[dashboard]\nbasic_auth = [{{ user = \"ops\", password = \"ops-password-1\", scope = \"write\" }}]\n",
            keys()
        ),
    )
    .await;
    create(&s, json!({"slug": "job", "interval": "1h"})).await;
    let r = browser().get(s.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Basic"));
    let r = browser()
        .get(s.url("/"))
        .basic_auth("ops", Some("wrong-password"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = browser()
        .get(s.url("/checks/job"))
        .basic_auth("ops", Some("ops-password-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let html = r.text().await.unwrap();
    assert!(html.contains("id=\"pause\""), "{html}");
    // The key login still works next to basic auth.
    let cookie = cookie_pair(&login(&s, READ).await);
    assert_eq!(page(&s, "/", &cookie).await.0, 200);
});

both_backends!(loopback_without_keys_is_open, |backend| async move {
    let s = TestServer::start(backend, "").await;
    s.create_check(json!({"slug": "job", "interval": "1h"}))
        .await;
    let (code, html) = page(&s, "/checks/job", "").await;
    assert_eq!(code, 200);
    assert!(html.contains("id=\"pause\""), "{html}");
});
