
-- SingularityContainer's module primitives (Lua). The easyblock's module_plan says what the module does at load, as
-- a list of steps; each step is a call of one of these functions (the Tcl module calls those of primitives.tcl).

-- Sets name to value like pushenv, so that unloading gives back exactly the value from before the load. Lmod keeps
-- that value base64-encoded on a stack, __LMOD_STACK_<name>, which outlives the module: it would give a later unload
-- the value of an earlier load. So the load puts the current value on the stack itself when the stack does not
-- start with it, and the unload drops the stack when only that value is left. An empty value cannot be on Lmod's
-- stack: it is kept as a marker value, which a command for the user's shell turns back into "" after the unload.
local EMPTY = "__SINGULARITYCONTAINER_EMPTY__"
local make_empty = {
    sh = 'if [ "${%n-}" = %e ]; then %n=; export %n; fi;',
    csh = 'if ( "`printenv %n`" == %e ) setenv %n "";',
    fish = 'test "$%n" = %e; and set -gx %n "";',
    python = 'os.environ.get("%n") != "%e" or os.environ.__setitem__("%n", "")',
}
local function lmod_base64(text)
    local digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    local encoded = {}
    for i = 1, #text, 3 do
        local a, b, c = text:byte(i, i + 2)
        local bits = a * 65536 + (b or 0) * 256 + (c or 0)
        for j = 3, 0, -1 do
            local digit = math.floor(bits / 64 ^ j) % 64 + 1
            encoded[#encoded + 1] = digits:sub(digit, digit)
        end
        if not c then encoded[#encoded] = "=" end
        if not b then encoded[#encoded - 1] = "=" end
    end
    return table.concat(encoded)
end
-- The user's value of name ("" for the marker of an empty value), or nil
local function user_value(name)
    local value = os.getenv(name)
    return value == EMPTY and "" or value
end
local function restorable_env(name, value)
    local stack_name = "__LMOD_STACK_" .. name
    local stack, current = os.getenv(stack_name) or "", user_value(name)
    local make_it_empty = make_empty[myShellType()]
    if current == "" and make_it_empty then
        current = EMPTY
    end
    if mode() == "load" and current == nil and stack ~= "" then
        unsetenv(stack_name)
    elseif mode() == "load" and current ~= nil and (stack == "" or stack:match("^[^:]*") ~= lmod_base64(current)) then
        setenv(stack_name, lmod_base64(current))
    end
    pushenv(name, value)
    local _, separators = stack:gsub(":", "")
    if mode() == "unload" and separators == 1 then
        setenv(stack_name, "")
    end
    if mode() == "unload" and make_it_empty and stack:match("^[^:]*:([^:]*)") == lmod_base64(EMPTY) then
        execute{cmd = make_it_empty:gsub("%%n", name):gsub("%%e", EMPTY), modeA = {"unload"}}
    end
end

-- The image: the copy in the install dir (or the central image it links to), else the central copy. Without
-- either, a load stops (stops: not EasyBuild's load of its fake module, for an install dir that may lack it).
local function find_image(sif, sif_name, central_dir, central_subdir, central_default, mod_name, stops)
    if isFile(sif) then
        return sif
    end
    if central_dir == "" then
        local repo_root = user_value("LUMI_CONTAINER_REPOSITORY_ROOT") or ""
        central_dir = repo_root ~= "" and pathJoin(repo_root, central_subdir) or central_default
    end
    local central_sif = pathJoin(central_dir, sif_name)
    if isFile(central_sif) then
        return central_sif
    elseif stops and mode() == "load" then
        local sif_dir = sif:match("^(.*)/[^/]*$")
        local where = sif_dir == central_dir and ("not in " .. central_dir) or
                      ("neither in " .. sif_dir .. " nor in " .. central_dir)
        LmodError(mod_name .. ": the container image " .. sif_name .. " is " .. where ..
                  ". Reinstall the module with eb, or restore the image.")
    end
    return sif
end

-- Binds: the user's own, then those of the easyconfig whose source is a directory or a file on this node (a modern
-- runtime does not start a container with a missing one), the run scripts and the user software, packed (read-only:
-- said, the runtime does not warn) or not. Apptainer reads its own names first, so they get the same values.
-- A bind of a link at its own path (a library's soname) binds the file it names too, each link of the way at its own
-- path: the host's other links to that file (libibverbs' providers) resolve in the container as on the host.
local function normal_path(path)  -- without "." and ".." (a link's target is relative to the link's directory)
    local parts = {}
    for part in path:gmatch("[^/]+") do
        if part == ".." then
            parts[#parts] = nil
        elseif part ~= "." then
            parts[#parts + 1] = part
        end
    end
    return "/" .. table.concat(parts, "/")
end
local function link_targets(path)  -- (none with ',' or ':', which a bind list cannot hold)
    local targets = {}
    for _ = 1, 8 do
        if lfs.symlinkattributes(path, "mode") ~= "link" then
            break
        end
        local ok, target = pcall(lfs.symlinkattributes, path, "target")  -- (LuaFileSystem 1.7 and later)
        if not ok or type(target) ~= "string" then
            break
        end
        path = normal_path(target:sub(1, 1) == "/" and target or (path:match("^(.*)/") .. "/" .. target))
        if path:find("[,:]") then
            break
        end
        targets[#targets + 1] = path
    end
    return targets
end
-- A bind as the runtime reads it, src[:dst[:opts]]: its source, its destination (the source where none is given) and
-- its options (the twin of parameters.bind_fields)
local function bind_fields(bind)
    local source, rest = bind:match("^([^:]*):?(.*)$")
    local destination, options = rest:match("^([^:]*):?(.*)$")
    return source, destination ~= "" and destination or source, options
end
-- Those whose source is a directory or a regular file, through links too, then the files that the links bound at
-- their own paths name (after all of the easyconfig's own: a bind of its own of one of them wins)
local function keep_binds(binds)
    local kept, targets = {}, {}
    for _, bind in ipairs(binds) do
        local source = bind_fields(bind)
        local mode = lfs.attributes(source, "mode")
        if mode == "directory" or mode == "file" then
            kept[#kept + 1] = bind
        end
        if mode == "file" and source == bind then
            for _, target in ipairs(link_targets(source)) do
                targets[#targets + 1] = target
            end
        end
    end
    for _, target in ipairs(targets) do
        kept[#kept + 1] = target
    end
    return kept
end
-- The venv's form: as the generation that the link names records it ("layers" or "file") where that form's files are
-- there, else (a generation of an earlier version, or a file deleted) as its files say; with no link, "directory" or
-- "missing". The record is read only if it is a regular file (a FIFO there would stop the load).
local function venv_form(installdir, record, squashfs, changes, directory)
    local path, form = pathJoin(installdir, record), nil
    if lfs.attributes(path, "mode") == "file" and lfs.symlinkattributes(path, "mode") == "file" then
        local file = io.open(path, "r")
        form = file and file:read("*l")
        if file then
            file:close()
        end
    end
    local has_squashfs, has_changes = isFile(pathJoin(installdir, squashfs)), isFile(pathJoin(installdir, changes))
    if (form == "layers" and has_squashfs and has_changes) or (form == "file" and has_squashfs) then
        return form
    elseif has_squashfs then  -- (no record, or a file deleted: what the files say)
        return has_changes and "layers" or "file"
    end
    return isDir(pathJoin(installdir, directory)) and "directory" or "missing"
end
-- The user software's bind for the venv's form (nil, and a warning at load, when it is missing; nil too for layers,
-- which are overlays, see set_overlays)
local function user_software_bind(installdir, form, squashfs, directory, mod_name)
    if form == "file" then
        return pathJoin(installdir, squashfs) .. ":/user-software:image-src=/user-software,ro"
    elseif form == "directory" then
        return pathJoin(installdir, directory) .. ":/user-software"
    elseif form == "missing" and mode() == "load" then
        LmodWarning(mod_name .. ": the virtual environment is missing (neither " .. pathJoin(installdir, squashfs) ..
                    " nor " .. pathJoin(installdir, directory) .. " exists): Python in the container is the " ..
                    "image's own. Reinstall the module (eb --rebuild), or put the file back.")
    end
end
-- The user's own list of binds or overlays, under either name (both when they differ; empty counts as unset): both
-- names get the same list, so that Apptainer (which reads its own first) and SingularityCE (which reads only
-- SINGULARITY_*) see the same.
local function users_list(apptainer_name, singularity_name)
    local list = user_value(apptainer_name) or ""
    local singularity_list = user_value(singularity_name) or ""
    if list == "" then
        return singularity_list
    elseif singularity_list ~= "" and singularity_list ~= list then
        return list .. "," .. singularity_list
    end
    return list
end
-- The user's personal layer (venv-pip install --user), for a venv in layers: where the user's personal dir has its
-- link, the overlay entries that check prints (it checks the layer is the user's alone and made on the install's venv
-- as it is, else says why on stderr, in one line); else nil, with no process. The personal dir is var's value, else
-- subdir in XDG_DATA_HOME (~/.local/share), then the module's name (the scripts' twin: personal_dir)
local function personal_layer(form, var, subdir, mod_name, packed, check)
    if form ~= "layers" or mode() ~= "load" then
        return nil
    end
    local top = user_value(var) or ""
    if top == "" then
        local data = os.getenv("XDG_DATA_HOME") or ""
        top = (data ~= "" and data or ((os.getenv("HOME") or "") .. "/.local/share")) .. "/" .. subdir
    end
    local link = top:gsub("/$", "") .. "/" .. mod_name .. "/" .. packed
    if lfs.symlinkattributes(link, "mode") ~= "link" then
        return nil
    end
    local entry = capture(check):gsub("\n$", "")
    return entry ~= "" and entry or nil
end
-- SINGULARITY_OVERLAY and APPTAINER_OVERLAY: the user's own overlays, then, where the venv's form is layers, the
-- SquashFS file and the changes on top of it, read-only; or, where the user has a personal layer, its entries (the
-- install's two files it was made on and it, from personal_layer)
local function set_overlays(installdir, form, squashfs, changes, personal)
    local overlays = users_list("APPTAINER_OVERLAY", "SINGULARITY_OVERLAY")
    if form == "layers" then
        overlays = (overlays == "" and "" or (overlays .. ",")) ..
                   (personal or (pathJoin(installdir, squashfs) .. ":ro," .. pathJoin(installdir, changes) .. ":ro"))
    end
    restorable_env("SINGULARITY_OVERLAY", overlays)
    restorable_env("APPTAINER_OVERLAY", overlays)
end
-- The user's binds first, then the module's: kept (keep_binds), always and the user software's, if any. No bind of
-- the module goes where one of the user's goes, in the *_BINDPATH lists or in SINGULARITY_BIND and APPTAINER_BIND
-- (the runtime's --bind, which LUMI's documentation uses): the runtime would say so at every start.
local function set_binds(kept, always, user_software)
    local mine = users_list("APPTAINER_BINDPATH", "SINGULARITY_BINDPATH")
    local taken = {}
    for entry in (mine .. "," .. users_list("APPTAINER_BIND", "SINGULARITY_BIND")):gmatch("[^,]+") do
        if not (entry == "ro" or entry == "rw" or entry:find("^image%-src=") or entry:find("^id=")) then
            local _, destination = bind_fields(entry)
            taken[destination] = true  -- (not an option of the bind before)
        end
    end
    local binds = {}
    for _, list in ipairs({kept, always, {user_software}}) do
        for _, bind in ipairs(list) do
            local _, destination = bind_fields(bind)
            if not taken[destination] then
                binds[#binds + 1] = bind
                taken[destination] = true
            end
        end
    end
    binds = table.concat(binds, ",")
    if mine ~= "" then
        binds = binds == "" and mine or (mine .. "," .. binds)
    end
    restorable_env("SINGULARITY_BINDPATH", binds)
    restorable_env("APPTAINER_BINDPATH", binds)
end

-- The environment in the container, under both names: PREPEND_PATH before the user's own, and the other variables
local function container_prepend_path(prepend)
    local user_prepend = user_value("SINGULARITYENV_PREPEND_PATH") or ""
    prepend = user_prepend == "" and prepend or (prepend .. ":" .. user_prepend)
    restorable_env("SINGULARITYENV_PREPEND_PATH", prepend)
    restorable_env("APPTAINERENV_PREPEND_PATH", prepend)
end
local function container_env(name, value)
    restorable_env("SINGULARITYENV_" .. name, value)
    restorable_env("APPTAINERENV_" .. name, value)
end

-- The caches (module help) are defaults (below), in a root private to the user: /tmp/<user>-caches, per job and node
-- when loaded in a job, else a fresh one (the rule of the wrappers and run scripts: CACHE_ROOT_RULE, which makes it:
-- script runs it). The wrappers and run scripts move them to the job and node they run in; an unload goes by the
-- load's root.
local function cache_root(script)
    local root = os.getenv("SINGULARITYCONTAINER_CACHE_ROOT") or ""
    if mode() == "load" then
        root = capture(script):gsub("\n$", "")
    end
    if root ~= "" then
        restorable_env("SINGULARITYCONTAINER_CACHE_ROOT", root)
    end
    return root
end

-- Defaults: plain variables, which the runtime passes into the container, set only where the user has none, so
-- that the user's own value wins, also when exported after the load. The ones set are remembered for the unload (in
-- record), which leaves a value the user has set since (the module's record of its own goes). The caches are
-- defaults too: {name, subdir} in root, if there is one.
local function set_defaults(record, defaults, root, caches)
    if root ~= "" then
        for _, item in ipairs(caches) do
            defaults[#defaults + 1] = {item[1], root .. "/" .. item[2]}
        end
    end
    local set_before = " " .. (os.getenv(record) or "") .. " "
    local set_now = {}
    for _, item in ipairs(defaults) do
        if mode() == "unload" then
            if not set_before:find(" " .. item[1] .. " ", 1, true) then
                -- not the module's
            elseif user_value(item[1]) == item[2] then
                restorable_env(item[1], item[2])
            else
                setenv("__LMOD_STACK_" .. item[1], "")
            end
        elseif user_value(item[1]) == nil then
            restorable_env(item[1], item[2])
            set_now[#set_now + 1] = item[1]
        end
    end
    if mode() == "unload" or #set_now > 0 then
        setenv(record, table.concat(set_now, " "))
    end
end
