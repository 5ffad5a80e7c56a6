-- Schema version 5: what each output's stub was rendered from besides its
-- synopsis and metadata (the header's reason line and the recall tool
-- names), as JSON ({"reason": "...", "tools": [read, search, list]}), so the
-- operator API can render the stub again exactly as the model saw it. NULL
-- for outputs stored before this version or not by a rewrite.

ALTER TABLE outputs ADD COLUMN stub_facts TEXT;
