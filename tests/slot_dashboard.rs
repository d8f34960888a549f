//! The slot ledger on the dashboard (SPEC §14), against the real server on
//! both databases: the list shows each check's latest slots as ticks
//! coloured by state, and the check's page a slot table with its attempts.

mod common;

use common::{eventually, TestServer};
use serde_json::json;

/// The `tk-…` classes of the ticks in the list's row of the check `key`,
/// oldest first.
fn ticks_of(page: &str, key: &str) -> Vec<String> {
    let row_start = page
        .find(&format!("href=\"/checks/{key}\""))
        .expect("the check is listed");
    let row = &page[row_start..];
    let row = &row[..row.find("</tr>").unwrap()];
    row.split("class=\"tick tk-")
        .skip(1)
        .map(|t| t[..t.find('"').unwrap()].to_string())
        .collect()
}

both_backends!(
    the_list_shows_slot_ticks_and_the_page_a_slot_table,
    |backend| async move {
        // Loopback without keys: the dashboard answers.
        let s = TestServer::start(backend, "").await;
        let uuid = s
            .create_uuid(json!({"slug": "ticks", "interval": "1h", "grace": "1h"}))
            .await;
        // Two slots two hours ago and one hour ago (named, as `overdue run`
        // names them): one failed, one done after a retry.
        let due = s.get_json(&format!("/ping/{uuid}/due")).await;
        let now_slot = chrono::DateTime::parse_from_rfc3339(due["slot"].as_str().unwrap())
            .unwrap()
            .with_timezone(&chrono::Utc);
        let at = |h: i64| {
            (now_slot - chrono::Duration::hours(h))
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        };
        let (two, one) = (at(2), at(1));
        let rid = uuid::Uuid::new_v4().to_string();
        for path in [
            format!("/ping/{uuid}/fail?slot={two}"),
            format!("/ping/{uuid}/start?slot={one}&rid={rid}"),
            format!("/ping/{uuid}/75?slot={one}&rid={rid}&retry=1"),
            format!("/ping/{uuid}/start?slot={one}&rid={rid}"),
            format!("/ping/{uuid}?slot={one}&rid={rid}"),
        ] {
            s.ping_ok(&path).await;
        }
        let page = eventually("the ledger shows both slots on the list", || async {
            let page = common::get_text(&common::browser(), s.url("/")).await;
            let t = ticks_of(&page, "ticks");
            (t.len() >= 3 && t[t.len() - 3..] == ["failed", "done", "pending"]).then_some(page)
        })
        .await;
        assert!(
            page.contains("title=\"") && page.contains(" failed\""),
            "a tick says its slot and state"
        );
        let check = common::get_text(&common::browser(), s.url("/checks/ticks")).await;
        let table = &check[check.find("id=\"slots\"").expect("a slot table")..];
        let table = &table[..table.find("</table>").unwrap()];
        // Newest first: the current slot, the retried one, the failed one.
        let order: Vec<&str> = ["pending", "done", "failed"]
            .iter()
            .map(|st| {
                table
                    .find(&format!("</i> {st}"))
                    .unwrap_or_else(|| panic!("{st} in {table}"))
            })
            .scan(0, |prev, i| {
                assert!(i >= *prev, "{table}");
                *prev = i;
                Some("")
            })
            .collect();
        assert_eq!(order.len(), 3);
        assert!(table.contains("retried (exit 75)"), "{table}");
        assert!(table.contains(&one) && table.contains(&two), "{table}");
        // The failed slot is a dead letter: the page says how to close it.
        assert!(check.contains("id=\"dead-letters\""));
    }
);
