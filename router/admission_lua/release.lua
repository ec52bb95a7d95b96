-- release.lua: ARGV[7..] ids (leases or waiting entries). Removes each in whatever state it is
-- (idempotent), then admits the next waiting entries of the pools that lost an entry.
-- Returns one integer per id: 0 absent, 1 was waiting, 2 was leased.
local out, pools = {}, {}
for i = 7, #ARGV do
  local r, m = drop_any(ARGV[i])
  out[#out + 1] = r
  if m then pools[m] = true end
end
for m in pairs(pools) do admit(m, nil) end
return out
