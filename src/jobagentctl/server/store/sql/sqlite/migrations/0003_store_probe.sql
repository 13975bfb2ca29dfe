-- jobagentctl schema v3 (SQLite): one row that readiness rewrites after a failed write (disk
-- full…) to learn whether writes work again. 64 KiB of fresh random bytes need as many new WAL
-- frames, so the probe fails while the disk cannot take a job of that size.

CREATE TABLE store_probe (
    id   INTEGER PRIMARY KEY,
    pad  BLOB NOT NULL
);
