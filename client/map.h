/*
 * map.h: a hash map from strings to pointers (map.c).
 */
#ifndef EVENTHUB_MAP_H
#define EVENTHUB_MAP_H

#include <stddef.h>

/*
 * A hash map from NUL-terminated strings to pointers.  Keys are not
 * copied: each must stay valid while it is in the map.
 */
typedef struct ehi_map
{
	const char **keys;
	void	  **values;
	size_t		cap;			/* a power of two, or 0 */
	size_t		count;
	size_t		used;			/* count plus deleted slots */
} ehi_map;

void	   *ehi_map_get(const ehi_map *m, const char *key);
/* Returns 0, or -1 when out of memory.  Replaces an existing key's value. */
int			ehi_map_put(ehi_map *m, const char *key, void *value);
void		ehi_map_remove(ehi_map *m, const char *key);
void		ehi_map_free(ehi_map *m);

#endif							/* EVENTHUB_MAP_H */
