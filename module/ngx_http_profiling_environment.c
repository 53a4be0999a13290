/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The defaults the environment gives the configuration, read in the master
 * (nginx clears its workers' environment): DD_SERVICE, DD_ENV, DD_VERSION,
 * DD_TAGS, the agent's address (DD_TRACE_AGENT_URL, DD_AGENT_HOST,
 * DD_TRACE_AGENT_PORT), debuginfod's servers (DEBUGINFOD_URLS) and cache.
 */

#include "ngx_http_profiling_module.h"


#define NGX_HTTP_PROFILING_APM_SOCKET  "/var/run/datadog/apm.socket"


/*
 * A variable as the workers will see it (nginx clears their environment):
 * "env NAME=value;" in the configuration, else the master's; *passed (if
 * not NULL) says whether an "env" directive passes it to them. The DD_*
 * variables are read here, in the master, either way.
 */
static char *
ngx_http_profiling_getenv(ngx_conf_t *cf, const char *name,
    ngx_uint_t *passed)
{
    size_t            len;
    ngx_str_t        *var;
    ngx_uint_t        i, listed;
    ngx_core_conf_t  *ccf;

    ccf = (ngx_core_conf_t *) ngx_get_conf(cf->cycle->conf_ctx,
                                           ngx_core_module);
    len = ngx_strlen(name);
    listed = 0;

    if (ccf != NULL && ccf->env.elts != NULL) {
        var = ccf->env.elts;

        /* For "NAME=value", nginx keeps len = NAME's, data the whole. */
        for (i = 0; i < ccf->env.nelts; i++) {
            if (var[i].len != len || ngx_strncmp(var[i].data, name, len) != 0)
            {
                continue;
            }

            listed = 1;

            if (var[i].data[len] == '=') {
                if (passed != NULL) {
                    *passed = 1;
                }

                return (char *) var[i].data + len + 1;
            }
        }
    }

    if (passed != NULL) {
        *passed = listed;
    }

    return getenv(name);
}


/*
 * Where debuginfod's files are kept, when debug files may be fetched:
 * by default "profiling_debuginfod" beside the client body temporary
 * files' directory (/var/lib/nginx on Debian, /var/cache/nginx in
 * nginx.org's packages, the prefix when built by hand). nginx creates it
 * at start, owned by the workers' user.
 */
ngx_int_t
ngx_http_profiling_debuginfod_path(ngx_conf_t *cf,
    ngx_http_profiling_main_conf_t *pmcf)
{
    u_char                    *p, *slash;
    char                      *urls;
    ngx_uint_t                 passed;
    ngx_str_t                  temp;
    ngx_path_t                *path;
    ngx_http_core_loc_conf_t  *clcf;

    if (pmcf->debuginfod_cache_max == NGX_CONF_UNSET) {
        pmcf->debuginfod_cache_max = 512 * 1024 * 1024;
    }

    urls = ngx_http_profiling_getenv(cf, "DEBUGINFOD_URLS", &passed);
    if (!passed) {
        urls = NULL;
    }

    if ((pmcf->debuginfod.data != NULL
         && ngx_strcmp(pmcf->debuginfod.data, "off") == 0)
        || (pmcf->debuginfod.data == NULL
            && (urls == NULL || urls[strspn(urls, " \t")] == '\0')))
    {
        ngx_str_set(&pmcf->debuginfod, "off");
        return NGX_OK;
    }

    if (pmcf->debuginfod.data == NULL) {
        /* the workers' DEBUGINFOD_URLS */
        pmcf->debuginfod.data = (u_char *) "";
    }

    if (pmcf->debuginfod_cache.data == NULL) {
        clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

        if (clcf->client_body_temp_path != NGX_CONF_UNSET_PTR
            && clcf->client_body_temp_path != NULL)
        {
            temp = clcf->client_body_temp_path->name;

        } else {
#ifdef NGX_HTTP_CLIENT_TEMP_PATH
            ngx_str_set(&temp, NGX_HTTP_CLIENT_TEMP_PATH);
#else
            ngx_str_set(&temp, "client_body_temp");
#endif
            if (ngx_conf_full_name(cf->cycle, &temp, 0) != NGX_OK) {
                return NGX_ERROR;
            }
        }

        while (temp.len > 1 && temp.data[temp.len - 1] == '/') {
            temp.len--;
        }

        slash = ngx_strlchr(temp.data, temp.data + temp.len, '/');
        for (p = slash; p != NULL;
             p = ngx_strlchr(p + 1, temp.data + temp.len, '/'))
        {
            slash = p;
        }

        temp.len = (slash == NULL) ? 0 : (size_t) (slash - temp.data);

        pmcf->debuginfod_cache.len = temp.len
                                     + sizeof("/profiling_debuginfod") - 1;
        pmcf->debuginfod_cache.data = ngx_pnalloc(cf->pool,
                                            pmcf->debuginfod_cache.len + 1);
        if (pmcf->debuginfod_cache.data == NULL) {
            return NGX_ERROR;
        }

        ngx_sprintf(pmcf->debuginfod_cache.data, "%V/profiling_debuginfod%Z",
                    &temp);
    }

    path = ngx_pcalloc(cf->pool, sizeof(ngx_path_t));
    if (path == NULL) {
        return NGX_ERROR;
    }

    path->name = pmcf->debuginfod_cache;
    path->conf_file = cf->conf_file->file.name.data;
    path->line = cf->conf_file->line;

    return ngx_add_path(cf, &path);
}


static ngx_int_t
ngx_http_profiling_set_env_str(ngx_conf_t *cf, ngx_str_t *s, const char *name)
{
    char  *value;

    if (s->data != NULL) {
        return NGX_OK;
    }

    value = ngx_http_profiling_getenv(cf, name, NULL);
    if (value == NULL || value[0] == '\0') {
        return NGX_OK;
    }

    s->len = ngx_strlen(value);
    s->data = ngx_pstrdup(cf->pool, &(ngx_str_t) { s->len, (u_char *) value });

    return (s->data != NULL) ? NGX_OK : NGX_ERROR;
}


/* DD_TAGS: "key:value" items separated by commas or spaces. */
static ngx_int_t
ngx_http_profiling_env_tags(ngx_conf_t *cf,
    ngx_http_profiling_main_conf_t *pmcf)
{
    u_char     *p, *last, *start;
    char       *value;
    ngx_str_t  *tag;

    value = ngx_http_profiling_getenv(cf, "DD_TAGS", NULL);
    if (pmcf->tags != NULL || value == NULL) {
        return NGX_OK;
    }

    pmcf->tags = ngx_array_create(cf->pool, 4, sizeof(ngx_str_t));
    if (pmcf->tags == NULL) {
        return NGX_ERROR;
    }

    p = (u_char *) value;
    last = p + ngx_strlen(value);

    while (p < last) {
        while (p < last && (*p == ',' || *p == ' ')) {
            p++;
        }

        start = p;
        while (p < last && *p != ',' && *p != ' ') {
            p++;
        }

        if (p == start || ngx_strlchr(start, p, ':') == NULL) {
            continue;
        }

        tag = ngx_array_push(pmcf->tags);
        if (tag == NULL) {
            return NGX_ERROR;
        }

        tag->len = p - start;
        tag->data = ngx_pstrdup(cf->pool, &(ngx_str_t) { tag->len, start });
        if (tag->data == NULL) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* The agent's address when no profiling_agent_url says it. */
static ngx_int_t
ngx_http_profiling_default_agent(ngx_conf_t *cf, ngx_str_t *url)
{
    char             *value, *path, *host, *port;
    ngx_str_t         s;
    const char       *err;
    ngx_file_info_t   fi;

    value = ngx_http_profiling_getenv(cf, "DD_TRACE_AGENT_URL", NULL);

    if (value != NULL && value[0] != '\0') {
        /* "/path" and "unix:///path" name a unix socket: "unix:/path". */
        path = value;

        if (ngx_strncmp(path, "unix://", 7) == 0) {
            path += 7;
        }

        if (path != value || path[0] == '/') {
            url->len = ngx_strlen(path) + 5;
            url->data = ngx_pnalloc(cf->pool, url->len + 1);
            if (url->data == NULL) {
                return NGX_ERROR;
            }
            ngx_sprintf(url->data, "unix:%s%Z", path);

        } else {
            s.len = ngx_strlen(value);
            s.data = (u_char *) value;

            url->len = s.len;
            url->data = ngx_pstrdup(cf->pool, &s);
            if (url->data == NULL) {
                return NGX_ERROR;
            }
        }

        err = ngx_http_profiling_check_url(cf->pool, url, 1);
        if (err != NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid value \"%s\" in the "
                               "DD_TRACE_AGENT_URL environment variable "
                               "(the profiling_agent_url default): %s",
                               value, err);
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    host = ngx_http_profiling_getenv(cf, "DD_AGENT_HOST", NULL);
    port = ngx_http_profiling_getenv(cf, "DD_TRACE_AGENT_PORT", NULL);

    if ((host == NULL || host[0] == '\0') && (port == NULL || port[0] == '\0')
        && ngx_file_info(NGX_HTTP_PROFILING_APM_SOCKET, &fi) == 0)
    {
        ngx_str_set(url, "unix:" NGX_HTTP_PROFILING_APM_SOCKET);
        return NGX_OK;
    }

    if (host == NULL || host[0] == '\0') {
        host = "localhost";
    }

    if (port == NULL || port[0] == '\0') {
        port = "8126";
    }

    /* A host name, an IPv4 or IPv6 address; a port number. */
    if (host[strspn(host, "abcdefghijklmnopqrstuvwxyz"
                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:[]%")]
        != '\0')
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%s\" in the DD_AGENT_HOST "
                           "environment variable (the profiling_agent_url "
                           "default): not a host name or address", host);
        return NGX_ERROR;
    }

    if (port[strspn(port, "0123456789")] != '\0') {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%s\" in the DD_TRACE_AGENT_PORT "
                           "environment variable (the profiling_agent_url "
                           "default): not a port number", port);
        return NGX_ERROR;
    }

    url->data = ngx_pnalloc(cf->pool, ngx_strlen(host) + ngx_strlen(port)
                                      + sizeof("http://[]:"));
    if (url->data == NULL) {
        return NGX_ERROR;
    }

    /* Brackets around an IPv6 address. */
    if (ngx_strchr(host, ':') != NULL && host[0] != '[') {
        url->len = ngx_sprintf(url->data, "http://[%s]:%s", host, port)
                   - url->data;
    } else {
        url->len = ngx_sprintf(url->data, "http://%s:%s", host, port)
                   - url->data;
    }

    err = ngx_http_profiling_check_url(cf->pool, url, 1);
    if (err != NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid agent address \"%V\" from the "
                           "DD_AGENT_HOST and DD_TRACE_AGENT_PORT environment "
                           "variables (the profiling_agent_url default): %s",
                           url, err);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * What the environment says where no directive did: DD_SERVICE, DD_ENV,
 * DD_VERSION, DD_TAGS, and the agent's address.
 */
ngx_int_t
ngx_http_profiling_environment_defaults(ngx_conf_t *cf,
    ngx_http_profiling_main_conf_t *pmcf)
{
    if (ngx_http_profiling_set_env_str(cf, &pmcf->service, "DD_SERVICE")
            != NGX_OK
        || ngx_http_profiling_set_env_str(cf, &pmcf->env, "DD_ENV") != NGX_OK
        || ngx_http_profiling_set_env_str(cf, &pmcf->version, "DD_VERSION")
           != NGX_OK
        || ngx_http_profiling_env_tags(cf, pmcf) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (pmcf->agent_url.data == NULL
        && ngx_http_profiling_default_agent(cf, &pmcf->agent_url) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}
