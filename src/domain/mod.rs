//! Pure logic, no I/O: checks, schedules, windows, what pings do, statuses.

pub mod active_hours; // active hours (quiet windows) in a check's time zone
pub mod blind_spot; // blind spots: which unobserved spans are, and the checks expected in them
pub mod check; // a check's definition, its validation, and a check as stored
pub mod depends; // depends_on: the graph of which checks wait for which; unknown slugs, cycles
pub mod evaluate; // evaluate(rules, summary, now): the status and the next instant it can change
pub mod explain; // a check's effective schedule in words, for `config check` and the dashboard
pub mod fold; // what a ping means: the fold's rules, shared by the writers and the readers
pub mod guard; // the job guard: whether a slot is due, lock TTLs, skip reasons
pub mod ledger; // the slot ledger: what became of each slot (pings in, exception rows and a mark out)
pub mod measure; // the per-check metrics measured from a summary at `now`
pub mod name; // how a check is named where its uuid (a capability) must not show: slug or unique_key
pub mod overlap; // when a check carries an overlap alert
pub mod ping; // what one ping does to a check's summary
pub mod schedule; // interval and cron schedules, DST-aware, always terminating
pub mod slots; // slots: the runs a check expects (cron fire times, epoch-aligned interval windows), their keys
pub mod status; // statuses and reasons
pub mod timeline; // the server's timeline: wall-clock steps found, backward ones slewed over
pub mod usual; // the usual item count: hour-of-week medians of a check's own history
