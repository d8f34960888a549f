-- PostgreSQL's replicas learn of deleted checks and changed slugs through a
-- notification (see migrations/postgres/0011_route_changes.sql). SQLite has
-- one process, which makes every change itself: nothing to do. This file
-- keeps the two folders' versions in step.
SELECT 1;
