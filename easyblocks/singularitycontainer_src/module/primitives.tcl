
# SingularityContainer's module primitives (Tcl). The easyblock's module_plan says what the module does at load, as
# a list of steps; each step is a call of one of these procs (the Lua module calls those of primitives.lua).

# Sets name to value like pushenv, so that unloading gives back exactly the value from before the load. Lmod keeps
# that value base64-encoded on a stack, __LMOD_STACK_<name>, which outlives the module: it would give a later unload
# the value of an earlier load. So the load puts the current value on the stack itself when the stack does not
# start with it, and the unload drops the stack when only that value is left. An empty value cannot be on Lmod's
# stack: it is kept as a marker value, which a command for the user's shell turns back into "" after the unload.
# Lmod runs Tcl modulefiles in its own process, and its Tcl pushenv writes the new value into the environment
# before Lmod saves the old one (TACC/Lmod#584): putting the old value back right after pushenv lets Lmod save the
# right one. All this only under Lmod: Environment Modules keeps a stack of its own.
set EMPTY __SINGULARITYCONTAINER_EMPTY__
set make_empty [dict create \
    sh {if [ "${%n-}" = %e ]; then %n=; export %n; fi;} \
    csh {if ( "`printenv %n`" == %e ) setenv %n "";} \
    fish {test "$%n" = %e; and set -gx %n "";} \
    python {os.environ.get("%n") != "%e" or os.environ.__setitem__("%n", "")}]
# Lmod's Tcl calls unloading "remove", Environment Modules "remove" or "unload"
proc unloading {} {
    return [expr {[module-info mode remove] || [module-info mode unload]}]
}
# The user's value of name ("" for the marker of an empty value, and when it is not set)
proc user_value {name} {
    if { ![info exists ::env($name)] || $::env($name) eq $::EMPTY } {
        return ""
    }
    return $::env($name)
}
proc lmod_base64 {text} {
    return [string map {+ - / _} [binary encode base64 [encoding convertto utf-8 $text]]]
}
proc restorable_env {name value} {
    set lmod [info exists ::env(LMOD_VERSION_MAJOR)]
    set stack_name __LMOD_STACK_$name
    set stack [expr {[info exists ::env($stack_name)] ? $::env($stack_name) : ""}]
    set had_value [info exists ::env($name)]
    if { $had_value } {
        set old_value $::env($name)
    }
    set current [user_value $name]
    set shell [module-info shelltype]
    set make_it_empty [expr {[dict exists $::make_empty $shell] ? [dict get $::make_empty $shell] : ""}]
    if { $had_value && $current eq "" && $make_it_empty ne "" } {
        set current $::EMPTY
    }
    if { $lmod && [module-info mode load] } {
        if { !$had_value && $stack ne "" } {
            unsetenv $stack_name
        } elseif { $had_value && ($stack eq "" || [lindex [split $stack :] 0] ne [lmod_base64 $current]) } {
            setenv $stack_name [lmod_base64 $current]
        }
    }
    pushenv $name $value
    if { !$lmod } {
        return
    }
    if { $had_value } {
        set ::env($name) $old_value
    } elseif { [info exists ::env($name)] } {
        unset ::env($name)
    }
    if { [unloading] && [llength [split $stack :]] == 2 } {
        setenv $stack_name ""
    }
    if { [unloading] && $make_it_empty ne "" && [lindex [split $stack :] 1] eq [lmod_base64 $::EMPTY] } {
        puts stdout [string map [list %n $name %e $::EMPTY] $make_it_empty]
    }
}

# The image: the copy in the install dir (or the central image it links to), else the central copy. Without
# either, a load stops (stops: not EasyBuild's load of its fake module, for an install dir that may lack it).
proc find_image {sif sif_name central_dir central_subdir central_default mod_name stops} {
    if { [file isfile $sif] } {
        return $sif
    }
    if { $central_dir eq "" } {
        if { [user_value LUMI_CONTAINER_REPOSITORY_ROOT] ne "" } {
            set central_dir [file join $::env(LUMI_CONTAINER_REPOSITORY_ROOT) $central_subdir]
        } else {
            set central_dir $central_default
        }
    }
    set central_sif [file join $central_dir $sif_name]
    if { [file isfile $central_sif] } {
        return $central_sif
    } elseif { $stops && [module-info mode load] } {
        set sif_dir [file dirname $sif]
        set where [expr {$sif_dir eq $central_dir ? "not in $central_dir" : "neither in $sif_dir nor in $central_dir"}]
        error "$mod_name: the container image $sif_name is $where.\
 Reinstall the module with eb, or restore the image."
    }
    return $sif
}

# Binds: the user's own, then those of the easyconfig whose source is a directory or a file on this node (a modern
# runtime does not start a container with a missing one), the run scripts and the user software, packed (read-only:
# said, the runtime does not warn) or not. Apptainer reads its own names first, so they get the same values.
# A bind of a link at its own path (a library's soname) binds the file it names too, each link of the way at its own
# path: the host's other links to that file (libibverbs' providers) resolve in the container as on the host.
proc normal_path {path} {
    set parts {}
    foreach part [split $path /] {
        if { $part eq ".." } {
            set parts [lrange $parts 0 end-1]
        } elseif { $part ne "." && $part ne "" } {
            lappend parts $part
        }
    }
    return "/[join $parts /]"
}
proc link_targets {path} {
    set targets {}
    for {set hop 0} {$hop < 8} {incr hop} {
        if { [catch {file readlink $path} target] } {
            break
        }
        set path [normal_path [expr {[string index $target 0] eq "/" ? $target : "[file dirname $path]/$target"}]]
        if { [string first , $path] >= 0 || [string first : $path] >= 0 } {
            break
        }
        lappend targets $path
    }
    return $targets
}
# Those whose source is a directory or a regular file, through links too, then the files that the links bound at
# their own paths name (after all of the easyconfig's own: a bind of its own of one of them wins)
proc keep_binds {binds} {
    set kept {}
    set targets {}
    foreach bind $binds {
        set source [lindex [bind_fields $bind] 0]
        if { [file isdirectory $source] || [file isfile $source] } {
            lappend kept $bind
        }
        if { [file isfile $source] && $source eq $bind } {
            set targets [concat $targets [link_targets $source]]
        }
    }
    return [concat $kept $targets]
}
# The venv's form: as the generation that the link names records it ("layers" or "file") where that form's files are
# there, else (a generation of an earlier version, or a file deleted) as its files say; with no link, "directory" or
# "missing". The record is read only if it is a regular file (a FIFO there would stop the load).
proc venv_form {installdir record squashfs changes directory} {
    set path [file join $installdir $record]
    set form ""
    if { [file isfile $path] && [file type $path] eq "file" && ![catch {open $path r} file] } {
        set form [gets $file]
        close $file
    }
    set has_squashfs [file isfile [file join $installdir $squashfs]]
    set has_changes [file isfile [file join $installdir $changes]]
    if { ($form eq "layers" && $has_squashfs && $has_changes) || ($form eq "file" && $has_squashfs) } {
        return $form
    } elseif { $has_squashfs } {
        return [expr {$has_changes ? "layers" : "file"}]
    }
    return [expr {[file isdirectory [file join $installdir $directory]] ? "directory" : "missing"}]
}
# The user software's bind for the venv's form ("", and a warning at load, when it is missing; "" too for layers,
# which are overlays, see set_overlays)
proc user_software_bind {installdir form squashfs directory mod_name} {
    if { $form eq "file" } {
        return "[file join $installdir $squashfs]:/user-software:image-src=/user-software,ro"
    } elseif { $form eq "directory" } {
        return "[file join $installdir $directory]:/user-software"
    } elseif { $form eq "missing" && [module-info mode load] } {
        puts stderr "$mod_name: the virtual environment is missing (neither\
 [file join $installdir $squashfs] nor [file join $installdir $directory] exists): Python in the container is\
 the image's own. Reinstall the module (eb --rebuild), or put the file back."
    }
    return ""
}
# The user's own list of binds or overlays, under either name (both when they differ; empty counts as unset): both
# names get the same list, so that Apptainer (which reads its own first) and SingularityCE (which reads only
# SINGULARITY_*) see the same.
proc users_list {apptainer_name singularity_name} {
    set list [user_value $apptainer_name]
    set singularity_list [user_value $singularity_name]
    if { $list eq "" } {
        return $singularity_list
    } elseif { $singularity_list ne "" && $singularity_list ne $list } {
        return "$list,$singularity_list"
    }
    return $list
}
# The user's personal layer (venv-pip install --user), for a venv in layers: where the user's personal dir has its
# link, the overlay entries that check prints (it checks the layer is the user's alone and made on the install's venv
# as it is, else says why on stderr, in one line); else "", with no process. The personal dir is var's value, else
# subdir in XDG_DATA_HOME (~/.local/share), then the module's name (the scripts' twin: personal_dir)
proc personal_layer {form var subdir mod_name packed check} {
    if { $form ne "layers" || ![module-info mode load] } {
        return ""
    }
    set top [user_value $var]
    if { $top eq "" } {
        set data [expr {[info exists ::env(XDG_DATA_HOME)] ? $::env(XDG_DATA_HOME) : ""}]
        if { $data eq "" } {
            set data [expr {[info exists ::env(HOME)] ? $::env(HOME) : ""}]/.local/share
        }
        set top $data/$subdir
    }
    set link [regsub {/$} $top ""]/$mod_name/$packed
    if { [catch {file type $link} type] || $type ne "link" } {
        return ""
    }
    if { [catch {exec /bin/sh -c $check 2>@ stderr} entry] } {
        return ""
    }
    return $entry
}
# SINGULARITY_OVERLAY and APPTAINER_OVERLAY: the user's own overlays, then, where the venv's form is layers, the
# SquashFS file and the changes on top of it, read-only; or, where the user has a personal layer, its entries (the
# install's two files it was made on and it, from personal_layer)
proc set_overlays {installdir form squashfs changes personal} {
    set overlays [users_list APPTAINER_OVERLAY SINGULARITY_OVERLAY]
    if { $form eq "layers" } {
        if { $personal eq "" } {
            set personal [file join $installdir $squashfs]:ro,[file join $installdir $changes]:ro
        }
        set overlays [expr {$overlays eq "" ? "" : "$overlays,"}]$personal
    }
    restorable_env SINGULARITY_OVERLAY $overlays
    restorable_env APPTAINER_OVERLAY $overlays
}
# A bind as the runtime reads it, src[:dst[:opts]]: its source, its destination (the source where none is given) and
# its options, a list (the twin of parameters.bind_fields)
proc bind_fields {bind} {
    set fields [split $bind :]
    set destination [lindex $fields 1]
    if { $destination eq "" } { set destination [lindex $fields 0] }
    return [list [lindex $fields 0] $destination [join [lrange $fields 2 end] :]]
}
# The user's binds first, then the module's: kept (keep_binds), always and the user software's, if any. No bind of
# the module goes where one of the user's goes, in the *_BINDPATH lists or in SINGULARITY_BIND and APPTAINER_BIND
# (the runtime's --bind, which LUMI's documentation uses): the runtime would say so at every start.
proc set_binds {kept always user_software} {
    set mine [users_list APPTAINER_BINDPATH SINGULARITY_BINDPATH]
    set taken {}
    foreach entry [split "$mine,[users_list APPTAINER_BIND SINGULARITY_BIND]" ,] {
        if { $entry ne "" && ![regexp {^(ro|rw|image-src=.*|id=.*)$} $entry] } {
            lappend taken [lindex [bind_fields $entry] 1]
        }
    }
    set binds {}
    foreach bind [concat $kept $always [expr {$user_software eq "" ? {} : [list $user_software]}]] {
        if { [lsearch -exact $taken [lindex [bind_fields $bind] 1]] < 0 } {
            lappend binds $bind
            lappend taken [lindex [bind_fields $bind] 1]
        }
    }
    set binds [join $binds ,]
    if { $mine ne "" } {
        set binds [expr {$binds eq "" ? $mine : "$mine,$binds"}]
    }
    restorable_env SINGULARITY_BINDPATH $binds
    restorable_env APPTAINER_BINDPATH $binds
}

# The environment in the container, under both names: PREPEND_PATH before the user's own, and the other variables
proc container_prepend_path {prepend} {
    set user_prepend [user_value SINGULARITYENV_PREPEND_PATH]
    set prepend [expr {$user_prepend eq "" ? $prepend : "$prepend:$user_prepend"}]
    restorable_env SINGULARITYENV_PREPEND_PATH $prepend
    restorable_env APPTAINERENV_PREPEND_PATH $prepend
}
proc container_env {name value} {
    restorable_env SINGULARITYENV_$name $value
    restorable_env APPTAINERENV_$name $value
}

# The caches (module help) are defaults (below), in a root private to the user: /tmp/<user>-caches, per job and node
# when loaded in a job, else a fresh one (the rule of the wrappers and run scripts: CACHE_ROOT_RULE, which makes it:
# script runs it). The wrappers and run scripts move them to the job and node they run in; an unload goes by the
# load's root.
proc cache_root {script} {
    set root [user_value SINGULARITYCONTAINER_CACHE_ROOT]
    if { [module-info mode load] && [catch {exec /bin/sh -c $script 2>@ stderr} root] } {
        set root ""
    }
    if { $root ne "" } {
        restorable_env SINGULARITYCONTAINER_CACHE_ROOT $root
    }
    return $root
}

# Defaults: plain variables, which the runtime passes into the container, set only where the user has none, so
# that the user's own value wins, also when exported after the load. The ones set are remembered for the unload (in
# record), which leaves a value the user has set since (the module's record of its own goes). The caches are
# defaults too: name subdir ... in root, if there is one.
proc set_defaults {record defaults root caches} {
    if { $root ne "" } {
        foreach {key subdir} $caches {
            lappend defaults $key "$root/$subdir"
        }
    }
    set set_before [split [user_value $record]]
    set set_now {}
    foreach {key value} $defaults {
        if { [unloading] } {
            if { [lsearch -exact $set_before $key] < 0 } {
                # not the module's
            } elseif { [user_value $key] eq $value } {
                restorable_env $key $value
            } else {
                setenv __LMOD_STACK_$key ""
            }
        } elseif { ![info exists ::env($key)] } {
            restorable_env $key $value
            lappend set_now $key
        }
    }
    if { [unloading] || [llength $set_now] > 0 } {
        setenv $record [join $set_now " "]
    }
}
