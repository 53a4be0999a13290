-- SPDX-License-Identifier: BSD-2-Clause
-- The demo's Lua app (location /lua/): a page of items rendered from a
-- template, escaped, and checksummed, every request.

local M = {}

local function escape(s)
    return (s:gsub("[<>&\"]", { ["<"] = "&lt;", [">"] = "&gt;",
                                ["&"] = "&amp;", ['"'] = "&quot;" }))
end

local function render(items)
    local out = {}
    for i, item in ipairs(items) do
        out[i] = string.format("<li id=\"%d\">%s: %.2f</li>", item.id,
                               escape(item.name), item.price)
    end
    return "<ul>" .. table.concat(out, "\n") .. "</ul>"
end

local function checksum(s)
    local h = 0
    for i = 1, #s do
        h = (h * 31 + s:byte(i)) % 4294967296
    end
    return h
end

function M.handle()
    local items = {}
    for i = 1, 20000 do
        items[i] = { id = i, name = "item <" .. i .. ">", price = i * 1.25 }
    end
    local page = render(items)
    ngx.say(#page, " bytes, checksum ", checksum(page))
end

return M
