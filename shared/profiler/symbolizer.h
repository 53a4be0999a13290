/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Symbolizer: maps instruction addresses of a process (this one, or the
 * one prof_symbolizer_set_pid names: the profiler process names its
 * worker's) to the loaded object (file, build id, ELF virtual address)
 * and to a function name.
 *
 * Threading: a symbolizer belongs to one thread (the profiler loop thread);
 * it is not thread-safe. It reads /proc/self/maps (/proc/PID/maps after
 * prof_symbolizer_set_pid) and ELF files, so it may block on file I/O:
 * never call it from a signal handler or the nginx event loop. To learn
 * whether the loader's objects changed (for a pc in no known object, in
 * refresh and in collect) it calls dl_iterate_phdr(): the loader's lock,
 * held for one callback that does not allocate. Never call it with that
 * lock held (from a dl_iterate_phdr() callback or an ELF constructor).
 *
 * When the maps are read: on the first lookup; for a pc in no known object
 * when the loader's count of loads and unloads changed since the last
 * read (dlopen, dlclose), or else at most 4 times at once and once a
 * second on average (mappings made without the loader); in collect when
 * that count changed; and on prof_symbolizer_refresh(). The loader's
 * count is this process's own: it says nothing of another process's
 * loads, so that process's maps are read again after a dlopen there only
 * at the rate for unknown pcs or on the owner's prof_symbolizer_refresh()
 * (the profiler process's prof_read_maps, profiler/queue_drain.h). A pc
 * in anonymous executable memory (JIT code) is in no object: it is
 * answered NULL and makes nothing grow.
 *
 * ELF files: every read is bounds-checked against the file's size. An
 * object whose file is malformed (headers, notes, section or symbol tables
 * out of bounds or inconsistent) has no symbols and is marked corrupt; a
 * malformed debug file is ignored as if absent.
 *
 * Memory: objects, names and build ids are owned by the symbolizer. Those
 * of an object stay valid until the first prof_symbolizer_collect() after
 * a read of the maps no longer shows it (dlclose), or until
 * prof_symbolizer_destroy(): the objects held are those mapped plus those
 * unmapped since the last collect.
 */

#ifndef PROF_SYMBOLIZER_H
#define PROF_SYMBOLIZER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "profiler/debuginfod.h"
#include "profiler/symbol_store.h"


typedef struct prof_symbolizer_s  prof_symbolizer_t;

typedef struct {
    unsigned      id;           /* 1, 2, ...: never reused by the symbolizer */
    uint64_t      start;        /* runtime range of the executable mapping */
    uint64_t      end;
    uint64_t      file_offset;  /* file offset of start */
    uint64_t      load_bias;    /* ELF virtual address = pc - load_bias */
    const char   *path;
    const char   *build_id;     /* lowercase hex, "" when the file has none */
    int           corrupt;      /* malformed ELF file: no symbols */
} prof_object_t;


typedef struct {
    uint64_t      maps_reads;       /* reads of the maps */
    uint64_t      objects_held;     /* objects in memory now */
    uint64_t      objects_evicted;  /* freed by prof_symbolizer_collect() */
    uint64_t      objects_corrupt;  /* found malformed, each counted once */
    uint64_t      functions;        /* in the symbol tables held */
    uint64_t      function_bytes;   /* of those tables' entries */
    uint64_t      dwarf_open;       /* objects whose DWARF is held */
    uint64_t      dwarf_lookups;    /* prof_symbolizer_inlines() calls
                                       that had DWARF to look in */
} prof_symbolizer_stats_t;


prof_symbolizer_t *prof_symbolizer_create(void);

/*
 * Names the pcs of another process (a profiler process's worker): its
 * maps are read instead of this one's. The objects are read from their
 * files by path; a worker's objects are all mapped in this process too
 * (the vdso's image is taken from here), but those loaded after the fork.
 */
void prof_symbolizer_set_pid(prof_symbolizer_t *sym, pid_t pid);

/* From any thread: the maps are not read again (that process is gone);
   the objects known keep naming their pcs. */
void prof_symbolizer_freeze(prof_symbolizer_t *sym);
void prof_symbolizer_destroy(prof_symbolizer_t *sym);

/*
 * Where debug files are looked up by build id
 * (default "/usr/lib/debug/.build-id"): <dir>/xx/yyyy.debug. When dir
 * ends in "/.build-id", its parent is also the global directory where
 * the debug file a .gnu_debuglink names is looked for (after the
 * object's directory and its .debug/), as gdb does.
 */
int prof_symbolizer_set_debug_dir(prof_symbolizer_t *sym, const char *dir);

/*
 * Debug files from debuginfod (NULL: none): an object whose files at hand
 * leave a function unnamed (stripped: .dynsym, MiniDebugInfo, nothing)
 * has its debug file asked when prof_symbolize() first finds a pc of it
 * in no function, without waiting; prof_symbolizer_take_fetched() takes
 * what came, waiting (when asked to) at most wait_ms for those under way.
 */
void prof_symbolizer_set_debuginfod(prof_symbolizer_t *sym,
    prof_debuginfod_t *d, int64_t wait_ms);

/*
 * The instance's symbol store (symbol_store.h; NULL: none, the default):
 * the inline tables of the files read for inlined functions come from
 * there (inline_table.h), built once for all the profiler processes, when
 * it has room.
 */
void prof_symbolizer_set_store(prof_symbolizer_t *sym,
    prof_symbol_store_t *store);

/*
 * The function containing pc in an object prof_symbolize() returned and
 * the symbolizer still holds (mapped or not), reading no file: NULL when
 * none, or when its names were never loaded.
 */
const char *prof_symbolizer_function(prof_symbolizer_t *sym,
    const prof_object_t *object, uint64_t pc);

#define PROF_INLINES_MAX  8

typedef struct {
    const char   *function;
    uint32_t      line;         /* 0: unknown */
} prof_inline_t;

/*
 * The functions inlined where pc is, in an object prof_symbolize()
 * returned and the symbolizer holds, from the DWARF of the file its names
 * came from (its own, a debug file, debuginfod's; at most 256 MB of
 * DWARF sections, decompressed): how many (at most max, else none),
 * innermost first, each with the line running in it; *line is the line
 * in the function around them (the call site of the outermost, or pc's
 * own line when none is inlined; 0: unknown). The names are valid as long
 * as the function names of the object (see prof_symbolizer_take_fetched),
 * and until the next prof_symbolizer_release_dwarf(). Reads the file the
 * first time an object is asked, and again after it was released.
 */
size_t prof_symbolizer_inlines(prof_symbolizer_t *sym,
    const prof_object_t *object, uint64_t pc, prof_inline_t *frames,
    size_t max, uint32_t *line);

/*
 * Releases the DWARF libdw read for the objects no
 * prof_symbolizer_inlines() asked since the last call (its copy of the
 * sections, decompressed, and its tables: megabytes for libc's debug
 * file), keeping the file open to read it again when asked. At a
 * period's close: what is read only for the new addresses of a burst is
 * not held once they are named. Only without a symbol store, or past its
 * bounds: an inline table from the store (set_store) holds no libdw
 * table, and stays mapped. How many were released.
 */
unsigned prof_symbolizer_release_dwarf(prof_symbolizer_t *sym);

/*
 * The debug files fetched since the last call become the names of their
 * objects (with wait, waiting for those under way, see above): how many
 * objects got new names. When it is not 0, every function name prof_symbolize()
 * returned before is invalid: the caller symbolizes its pcs again. Call
 * it when nothing being encoded holds such a name (before a closed
 * profile is encoded).
 */
size_t prof_symbolizer_take_fetched(prof_symbolizer_t *sym, int wait);

/* Whether the last prof_symbolizer_take_fetched() renamed object. */
int prof_symbolizer_renamed(prof_symbolizer_t *sym,
    const prof_object_t *object);

/*
 * Re-reads the maps now (/proc/self/maps, or /proc/PID/maps; objects
 * mapped outside the loader at an address known before, a process other
 * than this one, tests). 0 or -errno (-ESRCH once frozen).
 */
int prof_symbolizer_refresh(prof_symbolizer_t *sym);

/*
 * Finds the object mapping pc (reading the maps again when pc is unknown
 * and they may have changed, see above) and the function containing it:
 * the file's .symtab when present, else the .symtab of its debug file
 * found by build id, else of the one its .gnu_debuglink names, else its
 * MiniDebugInfo with .dynsym, else .dynsym (a stripped library always has
 * one, so the debug information must come first); later, the debug file
 * debuginfod gave (see above). *function is NULL when
 * no symbol covers pc. Returns NULL when no object maps pc. Deleted files
 * are objects without symbols; the vdso is read from memory.
 */
const prof_object_t *prof_symbolize(prof_symbolizer_t *sym, uint64_t pc,
    const char **function);

/*
 * Frees the objects unmapped (after reading the maps again if the loader's
 * set of objects changed): every pointer prof_symbolize() returned into
 * them (object, path, build id, function name) is then invalid. Returns
 * how many were freed: when it is not 0, the caller forgets every result
 * of prof_symbolize() it kept. Call it when nothing being encoded holds
 * such a pointer: after a closed profile is encoded, before an address of
 * the next one is symbolized.
 */
size_t prof_symbolizer_collect(prof_symbolizer_t *sym);

/* The objects mapped at the last read of the maps, by address. */
size_t prof_symbolizer_object_count(prof_symbolizer_t *sym);
const prof_object_t *prof_symbolizer_object(prof_symbolizer_t *sym,
    size_t i);

/* Where the functions of an object come from (without loading them). */
typedef enum {
    PROF_SYMBOLS_NONE = 0,      /* none: frames are addresses */
    PROF_SYMBOLS_SYMTAB,        /* the file's .symtab: every function */
    PROF_SYMBOLS_DEBUG_FILE,    /* the .symtab of its debug file (by
                                   build id, or .gnu_debuglink) */
    PROF_SYMBOLS_MINIDEBUGINFO, /* .gnu_debugdata's .symtab and .dynsym */
    PROF_SYMBOLS_DEBUGINFOD,    /* the .symtab of the debug file a
                                   debuginfod server gave */
    PROF_SYMBOLS_DYNSYM         /* exported functions only */
} prof_symbols_e;

prof_symbols_e prof_symbolizer_symbols(prof_symbolizer_t *sym, size_t i);

/* The same, once a pc of it was symbolized (no file read); else -1. */
int prof_symbolizer_symbols_loaded(prof_symbolizer_t *sym, size_t i);

/*
 * An object found corrupt and not returned by this function before, or
 * NULL: for one warning per object.
 */
const prof_object_t *prof_symbolizer_corrupt_object(prof_symbolizer_t *sym);

/*
 * An object named by debuginfod's debug file and not returned by this
 * function before, or NULL: for one line per object.
 */
const prof_object_t *prof_symbolizer_fetched_object(prof_symbolizer_t *sym);

void prof_symbolizer_stats(prof_symbolizer_t *sym,
    prof_symbolizer_stats_t *stats);

/*
 * Tests and fuzzing: parses the ELF file at path as the symbolizer parses
 * an object mapped from its offset 0 (program headers, build id note,
 * .symtab, else MiniDebugInfo with .dynsym, else .dynsym; no other file)
 * and looks up every function found.
 * *functions is how many. 0, -ENOEXEC when the file is malformed (then
 * *functions is 0), -EFAULT when a lookup is inconsistent (a bug), or
 * -errno.
 */
int prof_symbolizer_parse_file_for_test(const char *path, size_t *functions);


#endif /* PROF_SYMBOLIZER_H */
