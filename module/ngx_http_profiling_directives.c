/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The handlers of the directives nginx's own slot handlers cannot take:
 * each value parsed, bounded and stored in the main or location
 * configuration, or refused with the reason (nginx -t prints it).
 */

#include "ngx_http_profiling_module.h"
#include "profiler/file_export.h"


/* profiling on | off; "on" anywhere is noted in the main configuration. */
char *
ngx_http_profiling(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char                            *rv;
    ngx_http_profiling_loc_conf_t   *plcf = conf;
    ngx_http_profiling_main_conf_t  *pmcf;

    rv = ngx_conf_set_flag_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    if (plcf->enable) {
        pmcf = ngx_http_conf_get_module_main_conf(cf,
                                                  ngx_http_profiling_module);
        pmcf->enabled_anywhere = 1;
    }

    return NGX_CONF_OK;
}


/* A time directive, within the bounds its command gives (cmd->post). */
char *
ngx_http_profiling_time(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char                              *p = conf;
    ngx_str_t                         *value;
    ngx_msec_t                        *msp;
    ngx_http_profiling_time_bounds_t  *bounds = cmd->post;

    msp = (ngx_msec_t *) (p + cmd->offset);
    if (*msp != NGX_CONF_UNSET_MSEC) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (bounds->off && ngx_strcmp(value[1].data, "off") == 0) {
        *msp = 0;
        return NGX_CONF_OK;
    }

    *msp = ngx_parse_time(&value[1], 0);

    if (*msp == (ngx_msec_t) NGX_ERROR
        || *msp < bounds->min || *msp > bounds->max)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a time %s",
                           &value[1], &cmd->name, bounds->range);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * profiling_max_cpu PERCENT | off: a percentage of the worker's CPU,
 * "2", "2%" or "0.5%" (two decimals at most), above 0 and at most 100.
 */
char *
ngx_http_profiling_max_cpu(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    u_char      *p, *end;
    ngx_str_t   *value;
    ngx_uint_t   ppm, scale, digits;

    if (pmcf->max_cpu_ppm != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        pmcf->max_cpu_ppm = 0;
        return NGX_CONF_OK;
    }

    p = value[1].data;
    end = p + value[1].len;

    if (end > p && end[-1] == '%') {
        end--;
    }

    ppm = 0;
    digits = 0;

    for ( /* void */ ; p < end && *p >= '0' && *p <= '9'; p++) {
        ppm = ppm * 10 + (*p - '0');
        if (++digits > 3) {
            goto invalid;
        }
    }

    if (digits == 0) {
        goto invalid;
    }

    ppm *= 10000;
    scale = 1000;

    if (p < end && *p == '.') {
        for (p++; p < end && *p >= '0' && *p <= '9' && scale >= 100; p++) {
            ppm += (*p - '0') * scale;
            scale /= 10;
        }
    }

    if (p != end || ppm == 0 || ppm > 1000000) {
        goto invalid;
    }

    pmcf->max_cpu_ppm = ppm;

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\" directive, "
                       "it must be a percentage above 0 and at most 100 "
                       "(e.g. \"2%%\", \"0.5%%\") or \"off\"",
                       &value[1], &cmd->name);
    return NGX_CONF_ERROR;
}


char *
ngx_http_profiling_max_frames(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    ngx_int_t   n;
    ngx_str_t  *value;

    if (pmcf->max_frames != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;
    n = ngx_atoi(value[1].data, value[1].len);

    if (n == NGX_ERROR || n < 8 || n > PROF_MAX_FRAMES_LIMIT) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a number between 8 and %d",
                           &value[1], &cmd->name, PROF_MAX_FRAMES_LIMIT);
        return NGX_CONF_ERROR;
    }

    pmcf->max_frames = n;

    return NGX_CONF_OK;
}


char *
ngx_http_profiling_memory_limit(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    ssize_t     size;
    ngx_str_t  *value;

    if (pmcf->memory_limit != NGX_CONF_UNSET_SIZE) {
        return "is duplicate";
    }

    value = cf->args->elts;

    /* ngx_parse_size() knows k and m; a memory limit may be in g. */
    if (value[1].len > 1
        && (value[1].data[value[1].len - 1] == 'g'
            || value[1].data[value[1].len - 1] == 'G'))
    {
        size = ngx_atosz(value[1].data, value[1].len - 1);
        size = (size == NGX_ERROR || size > 1) ? NGX_ERROR
                                               : size * 1024 * 1024 * 1024;

    } else {
        size = ngx_parse_size(&value[1]);
    }

    if (size == NGX_ERROR || size < 256 * 1024
        || size > 1024 * 1024 * 1024)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a size between 256k and 1g",
                           &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    pmcf->memory_limit = size;

    return NGX_CONF_OK;
}


char *
ngx_http_profiling_dump_dir(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    ngx_str_t  *value;

    if (pmcf->dump_dir.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"\" in \"%V\" directive",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    pmcf->dump_dir = value[1];

    if (ngx_conf_full_name(cf->cycle, &pmcf->dump_dir, 0) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    /* Trailing slashes would double in file names. */
    while (pmcf->dump_dir.len > 1
           && pmcf->dump_dir.data[pmcf->dump_dir.len - 1] == '/')
    {
        pmcf->dump_dir.len--;
    }

    return NGX_CONF_OK;
}


/*
 * profiling_dump_keep: a number of files and/or a size (with a unit), or
 * off. A plain number is a count.
 */
char *
ngx_http_profiling_dump_keep(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    off_t        size;
    ngx_int_t    n;
    ngx_str_t   *value;
    ngx_uint_t   i, have_count, have_size;

    if (pmcf->dump_keep_files != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;
    pmcf->dump_keep_files = 0;
    pmcf->dump_keep_bytes = 0;
    have_count = 0;
    have_size = 0;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_strcmp(value[i].data, "off") == 0) {
            if (cf->args->nelts == 2) {
                return NGX_CONF_OK;
            }
            goto invalid;
        }

        if (value[i].len > 0 && isdigit(value[i].data[value[i].len - 1])) {
            n = ngx_atoi(value[i].data, value[i].len);
            if (have_count || n == NGX_ERROR || n < 1
                || n > PROF_DUMP_KEEP_FILES_MAX)
            {
                goto invalid;
            }
            pmcf->dump_keep_files = n;
            have_count = 1;
            continue;
        }

        size = ngx_parse_offset(&value[i]);
        if (have_size || size == NGX_ERROR || size < 64 * 1024) {
            goto invalid;
        }
        pmcf->dump_keep_bytes = size;
        have_size = 1;
    }

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\" directive, it must "
                       "be a number of files (1..%d) and/or a size with a "
                       "unit k, m or g (at least 64k), or \"off\"",
                       &value[i], &cmd->name, PROF_DUMP_KEEP_FILES_MAX);

    return NGX_CONF_ERROR;
}


char *
ngx_http_profiling_tags(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    u_char      *colon;
    ngx_str_t   *value, *tag;
    ngx_uint_t   i;

    if (pmcf->tags == NULL) {
        pmcf->tags = ngx_array_create(cf->pool, 4, sizeof(ngx_str_t));
        if (pmcf->tags == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {
        colon = ngx_strlchr(value[i].data, value[i].data + value[i].len, ':');

        /* Commas in values are replaced when the tags are sent. */
        if (colon == NULL || colon == value[i].data
            || colon == value[i].data + value[i].len - 1)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid value \"%V\" in \"%V\" directive, "
                               "it must be \"key:value\"",
                               &value[i], &cmd->name);
            return NGX_CONF_ERROR;
        }

        tag = ngx_array_push(pmcf->tags);
        if (tag == NULL) {
            return NGX_CONF_ERROR;
        }

        *tag = value[i];
    }

    return NGX_CONF_OK;
}


/*
 * A server's address as nginx's URL parser sees it: NULL when valid, else
 * why not. http://host[:port][/path], https://..., and unix:/path when
 * unix_ok (the agent's, not Pyroscope's).
 */
const char *
ngx_http_profiling_check_url(ngx_pool_t *pool, ngx_str_t *url,
    ngx_uint_t unix_ok)
{
    u_char     *p, *last;
    ngx_url_t   u;

    last = url->data + url->len;

    for (p = url->data; p < last; p++) {
        if (*p <= ' ' || *p >= 0x7f) {
            return "a URL has no space, control or non-ASCII character";
        }
    }

    ngx_memzero(&u, sizeof(ngx_url_t));

    if (unix_ok && url->len >= 5 && ngx_strncmp(url->data, "unix:", 5) == 0)
    {
        u.url = *url;

        if (ngx_parse_url(pool, &u) != NGX_OK) {
            return u.err ? u.err : "invalid unix domain socket";
        }

        return (url->len > 5 && url->data[5] == '/')
               ? NULL : "the unix domain socket's path must be absolute";
    }

    if (url->len >= 7 && ngx_strncmp(url->data, "http://", 7) == 0) {
        u.url.data = url->data + 7;
        u.default_port = 80;

    } else if (url->len >= 8 && ngx_strncmp(url->data, "https://", 8) == 0) {
        u.url.data = url->data + 8;
        u.default_port = 443;

    } else {
        return unix_ok ? "the scheme must be http://, https:// or unix:"
                       : "the scheme must be http:// or https://";
    }

    u.url.len = last - u.url.data;
    u.uri_part = 1;
    u.no_resolve = 1;

    if (ngx_parse_url(pool, &u) != NGX_OK) {
        return u.err ? u.err : "invalid URL";
    }

    if (u.host.len == 0) {
        return "no host";
    }

    if (u.host.data[0] != '[') {
        for (p = u.host.data; p < u.host.data + u.host.len; p++) {
            if (!isalnum(*p) && *p != '.' && *p != '-' && *p != '_') {
                return "invalid host";
            }
        }
    }

    if (ngx_strlchr(u.uri.data, u.uri.data + u.uri.len, '?') != NULL
        || ngx_strlchr(u.uri.data, u.uri.data + u.uri.len, '#') != NULL)
    {
        return "a URL has no query or fragment";
    }

    return NULL;
}


char *
ngx_http_profiling_agent_url(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    ngx_str_t   *value;
    const char  *err;

    if (pmcf->agent_url.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") != 0) {
        err = ngx_http_profiling_check_url(cf->pool, &value[1], 1);

        if (err != NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid value \"%V\" in \"%V\" directive "
                               "(%s): it must be \"http://host:port\", "
                               "\"https://host:port\", \"unix:/path\" "
                               "or \"off\"", &value[1], &cmd->name, err);
            return NGX_CONF_ERROR;
        }
    }

    pmcf->agent_url = value[1];

    return NGX_CONF_OK;
}


/* profiling_debuginfod off | URL...: where debug files are fetched. */
char *
ngx_http_profiling_debuginfod(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    u_char      *p;
    size_t       len;
    ngx_str_t   *value;
    ngx_uint_t   i;

    if (pmcf->debuginfod.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0 && cf->args->nelts == 2) {
        pmcf->debuginfod = value[1];
        return NGX_CONF_OK;
    }

    len = 0;

    for (i = 1; i < cf->args->nelts; i++) {
        if (!((value[i].len > 7
               && ngx_strncmp(value[i].data, "http://", 7) == 0)
              || (value[i].len > 8
                  && ngx_strncmp(value[i].data, "https://", 8) == 0))
            || ngx_strlchr(value[i].data, value[i].data + value[i].len, ' ')
            || ngx_strlchr(value[i].data, value[i].data + value[i].len, '\t'))
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid value \"%V\" in \"%V\" directive, "
                               "it must be \"off\" or debuginfod servers' "
                               "URLs (\"http://...\", \"https://...\")",
                               &value[i], &cmd->name);
            return NGX_CONF_ERROR;
        }

        len += value[i].len + 1;
    }

    /* libdebuginfod's DEBUGINFOD_URLS: separated by spaces. */
    p = ngx_pnalloc(cf->pool, len);
    if (p == NULL) {
        return NGX_CONF_ERROR;
    }

    pmcf->debuginfod.data = p;

    for (i = 1; i < cf->args->nelts; i++) {
        p = ngx_cpymem(p, value[i].data, value[i].len);
        *p++ = (i + 1 < cf->args->nelts) ? ' ' : '\0';
    }

    pmcf->debuginfod.len = len - 1;

    return NGX_CONF_OK;
}


/* profiling_debuginfod_cache path [max_size=size] */
char *
ngx_http_profiling_debuginfod_cache(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    off_t       size;
    ngx_str_t  *value, s;

    if (pmcf->debuginfod_cache.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"\" in \"%V\" directive",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    pmcf->debuginfod_cache = value[1];

    if (ngx_conf_full_name(cf->cycle, &pmcf->debuginfod_cache, 0) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (cf->args->nelts == 2) {
        return NGX_CONF_OK;
    }

    if (ngx_strncmp(value[2].data, "max_size=", 9) != 0) {
        goto invalid;
    }

    s.data = value[2].data + 9;
    s.len = value[2].len - 9;

    size = ngx_parse_offset(&s);
    if (size == NGX_ERROR || size < 1024 * 1024) {
        goto invalid;
    }

    pmcf->debuginfod_cache_max = size;

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\" directive, it must "
                       "be \"max_size=\" and a size of at least 1m",
                       &value[2], &cmd->name);
    return NGX_CONF_ERROR;
}
